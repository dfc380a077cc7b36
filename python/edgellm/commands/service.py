"""`edgellm service install [--user] [--print] MODEL [serve options]`: `edgellm serve` as a
systemd service (the unit is built by edgellm.service)."""
import getpass
import os
import re
import shutil
import sys
from pathlib import Path

import click


@click.group("service")
def command():
    """Run `edgellm serve` as a systemd service."""


def _executable(given):
    if given:
        return [given]
    script = Path(sys.executable).parent / "edgellm"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("edgellm")
    if found:
        return [os.path.abspath(found)]
    return [sys.executable, "-m", "edgellm"]


@command.command("install", context_settings={"ignore_unknown_options": True,
                                               "allow_interspersed_args": False})
@click.option("--user", "user_unit", is_flag=True,
              help="A systemd --user unit in ~/.config/systemd/user (no root needed; runs while "
                   "you are logged in, or always after `loginctl enable-linger`).")
@click.option("--print", "print_only", is_flag=True, help="Write the unit to stdout only.")
@click.option("--name", default="edgellm", show_default=True,
              help="Unit name (NAME.service).")
@click.option("--unit-dir", default=None, type=click.Path(file_okay=False),
              help="Folder to write the unit to [default: /etc/systemd/system, or "
                   "~/.config/systemd/user with --user].")
@click.option("--run-as", default=None,
              help="User= of a system unit [default: the invoking user (sudo's caller)].")
@click.option("--exec", "executable", default=None,
              help="The edgellm executable the unit runs [default: this installation's].")
@click.option("--memory-max", default=None, help="MemoryMax= of the unit, e.g. 1200M.")
@click.argument("model")
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED)
def install(user_unit, print_only, name, unit_dir, run_as, executable, memory_max, model,
            serve_args):
    """Write a systemd unit that runs `edgellm serve MODEL SERVE_ARGS...`.

    SERVE_ARGS are `edgellm serve`'s options, checked now; put them after MODEL.
    """
    from edgellm import service
    from edgellm.commands import serve

    args = list(serve_args)
    try:  # serve's own parser: a bad option fails here, not at boot
        serve.command.make_context("edgellm serve", [model, *args])
    except click.exceptions.Exit:
        raise click.UsageError("give serve options, not --help, after MODEL") from None
    except click.ClickException as e:
        raise click.UsageError(f"edgellm serve would refuse these options: {e.format_message()}") from None
    if not re.fullmatch(r"[A-Za-z0-9_.@-]+", name):
        raise click.BadParameter("letters, digits and - _ . @ only", param_hint="--name")
    env = {k: os.environ[k] for k in ("EDGELLM_MODELS", "EDGELLM_BUILD_DIR", "EDGELLM_MEMORY_LIMIT")
           if os.environ.get(k)}
    if "EDGELLM_BUILD_DIR" in env:  # a development checkout: the unit needs its package path
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in
                                                os.environ["PYTHONPATH"].split(os.pathsep) if p)
    unit = service.ServiceUnit(
        model=model, serve_args=args, executable=_executable(executable), user_unit=user_unit,
        run_as=None if user_unit else (run_as or os.environ.get("SUDO_USER") or getpass.getuser()),
        environment=env, memory_max=memory_max)
    try:
        text = unit.text()
    except service.ServiceError as e:
        raise click.UsageError(str(e)) from None
    if print_only:
        click.echo(text, nl=False)
        return
    folder = Path(unit_dir) if unit_dir else service.unit_dir(user_unit)
    path = folder / f"{name}.service"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except PermissionError:
        raise click.ClickException(f"cannot write {path}: permission denied (run it with sudo, "
                                   "or give --user for a user unit)") from None
    except OSError as e:
        raise click.ClickException(f"cannot write {path}: {e.strerror}") from None
    ctl = "systemctl --user" if user_unit else "sudo systemctl"
    journal = "journalctl --user -u" if user_unit else "journalctl -u"
    click.echo(f"wrote {path}\nstart it now and at every boot:\n"
               f"  {ctl} daemon-reload\n  {ctl} enable --now {name}\n"
               f"logs: {journal} {name} -f", err=True)

