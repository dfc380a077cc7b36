from edgellm.cli import main

main()
