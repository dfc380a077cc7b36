"""`edgellm convert HF_DIR OUT.gguf [--type T]`: a Hugging Face safetensors checkpoint to GGUF
with edgellm's own converter (edgellm/convert/); a PEFT LoRA folder (adapter_config.json) to a
GGUF LoRA adapter (`--base` the base model's Hugging Face folder: edgellm/convert/lora.py); a
vision-language checkpoint (Gemma 3, SmolVLM / Idefics3, Qwen2.5-VL) to the text GGUF and its
projector GGUF, in llama.cpp's layout (edgellm/convert/vlm.py)."""
import click

from edgellm.convert.writer import OUT_TYPES


@click.command("convert")
@click.argument("hf_dir", type=click.Path(file_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--type", "out_type", default="F16", show_default=True,
              type=click.Choice(OUT_TYPES, case_sensitive=False), help="Tensor type of the matrices.")
@click.option("--dry-run", is_flag=True, help="Print the plan (tensors, shapes, types, bytes); write nothing.")
@click.option("-t", "--threads", default=0, type=int, help="Quantizer threads (default: all CPUs).")
@click.option("--base", "base_dir", default=None, type=click.Path(file_okay=False),
              help="LoRA: the base model's Hugging Face folder (default: adapter_config.json's "
                   "base_model_name_or_path when it is a local folder).")
@click.option("--mmproj", "mmproj_out", default=None, type=click.Path(dir_okay=False),
              help="Vision-language checkpoints: where to write the projector (default: mmproj-OUT "
                   "beside OUT, where `run`/`serve` find it).")
@click.option("--mmproj-type", default=None, type=click.Choice(("F32", "F16"), case_sensitive=False),
              help="The projector's matrix type (default: F32 for --type F32, else F16, as published "
                   "projectors are).")
def command(hf_dir, out, out_type, dry_run, threads, base_dir, mmproj_out, mmproj_type):
    """Write OUT: HF_DIR's config.json, tokenizer.json and safetensors weights as GGUF; or, for a
    PEFT LoRA folder (adapter_config.json + adapter_model.safetensors), a GGUF LoRA adapter
    (F16 or F32) that `edgellm run/serve BASE --lora` take."""
    import os
    import time

    from edgellm import EdgeLLMError
    from edgellm.convert import convert, plan
    from edgellm.convert import lora
    from edgellm.convert.writer import stderr_progress

    t0 = time.perf_counter()
    try:
        if lora.is_adapter_dir(hf_dir):
            base = lora.base_dir_of(hf_dir, base_dir)
            if dry_run:
                click.echo(lora.plan_lora(hf_dir, base).describe())
                return
            lp = lora.convert_lora(hf_dir, out, base, out_type)
            click.echo(f"wrote {out} ({os.path.getsize(out) / 2**20:.2f} MiB, LoRA adapter for {lp.arch}, "
                       f"{len(lp.pairs)} matrices, alpha {lp.alpha:g}) in {time.perf_counter() - t0:.1f} s")
            return
        if base_dir:
            raise click.UsageError("--base is for LoRA adapter folders (with adapter_config.json)")
        from edgellm.convert import vlm
        from edgellm.convert.checkpoint import Checkpoint

        is_vlm = os.path.isdir(hf_dir) and os.path.isfile(os.path.join(hf_dir, "config.json")) and \
            vlm.vlm_arch(Checkpoint(hf_dir).config) is not None
        if (mmproj_out or mmproj_type) and not is_vlm:
            raise click.UsageError("--mmproj and --mmproj-type are for vision-language checkpoints")
        mm_type = (mmproj_type or ("F32" if out_type.upper() == "F32" else "F16")).upper()
        mm_out = mmproj_out or vlm.mmproj_path_for(out)
        if dry_run:
            click.echo(plan(hf_dir, out_type).describe())
            if is_vlm:
                click.echo(vlm.plan_mmproj(Checkpoint(hf_dir), mm_type).describe())
            return
        cp = convert(hf_dir, out, out_type, n_threads=threads, progress=stderr_progress)
        mp = vlm.convert_mmproj(hf_dir, mm_out, mm_type) if is_vlm else None
    except (EdgeLLMError, OSError) as e:
        raise click.ClickException(str(e))
    click.echo(f"wrote {out} ({os.path.getsize(out) / 2**20:.1f} MiB, {cp.arch}, {len(cp.tensors)} tensors, "
               f"{cp.file_type}) in {time.perf_counter() - t0:.1f} s")
    if mp is not None:
        click.echo(f"wrote {mm_out} ({os.path.getsize(mm_out) / 2**20:.1f} MiB, projector {mp.projector}, "
                   f"{len(mp.tensors)} tensors, {mp.file_type})")
