"""Measuring tools behind `edgellm bench`, `edgellm perplexity` and `edgellm quantize`, shared
with the scripts in bench/ (compare.py, startup.py, make_synthetic.py).

- model_info: the "llama 135M Q4_1" label, file size and parameter count of a GGUF file.
- progress: a progress bar on stderr, drawn only when stderr is a terminal.
- throughput: llama-bench's method (pp / tg / batched decode) over _core.ModelRunner/BatchRunner.
- perplexity: llama.cpp's perplexity method over _core.ModelRunner.
- quantize: re-quantize a GGUF file with edgellm's own block quantizers.
"""
