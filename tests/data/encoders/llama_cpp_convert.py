"""llama.cpp's convert_hf_to_gguf.py (--outtype f32) on a fixture checkpoint, for the fixture scripts here.

llama.cpp names a BPE pre-tokenizer by hashing a tokenization of its test text and refuses a vocabulary
it does not know (the tiny ones here); `pre` answers that check (tokenizer.ggml.pre) and the rest of
the converter runs as it is."""
import subprocess
import sys

LLAMA_CPP = "/work/peers/llama.cpp"


def llama_cpp_convert(folder: str, outfile: str, pre: str = None) -> None:
    patch = f"import conversion.base as b; b.TextModel.get_vocab_base_pre = lambda self, tok: {pre!r}; " if pre else ""
    subprocess.run([sys.executable, "-c", f"import sys, runpy; sys.path.insert(0, {LLAMA_CPP!r}); {patch}"
                    f"sys.argv = ['convert_hf_to_gguf.py', {folder!r}, '--outtype', 'f32', '--outfile', {outfile!r}]; "
                    f"runpy.run_path({LLAMA_CPP + '/convert_hf_to_gguf.py'!r}, run_name='__main__')"],
                   check=True, capture_output=True)
