"""`edgellm ray-serve MODEL --replicas N --threads K`: replicas of `edgellm serve` behind Ray
Serve's HTTP proxy (edgellm.integrations.ray_serve; docs/scale-out.md)."""
import click

from .serve import _read_key, _size


@click.command("ray-serve")
@click.argument("model")
@click.option("--replicas", default=2, show_default=True, type=click.IntRange(1),
              help="Replicas, each one process with its own engine.")
@click.option("--threads", "-t", default=None, type=click.IntRange(1),
              help="Compute threads per replica [default: the engine's choice].")
@click.option("--num-cpus", default=None, type=click.FloatRange(0, min_open=True),
              help="CPUs Ray reserves per replica [default: --threads, else 1].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of Ray Serve's HTTP proxy.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--address", default=None,
              help="Ray cluster to join (e.g. auto, or ray://HOST:10001) [default: RAY_ADDRESS, "
                   "else a local Ray started here].")
@click.option("--api-key", default=None, help="Require 'Authorization: Bearer KEY' (not /health).")
@click.option("--api-key-file", default=None, type=click.Path(dir_okay=False),
              help="Read the API key from a file.")
@click.option("--parallel", "-np", default=4, show_default=True, type=click.IntRange(1, 1024),
              help="Sequences each replica runs at once; Ray sends a replica no more requests "
                   "than that and queues the rest in its router.")
@click.option("--ctx-size", "-c", default=None, type=click.IntRange(1),
              help="Context length per sequence [default: the model's trained context, at most 4096].")
@click.option("--kv-memory", default=None, callback=_size, help="KV cache memory per replica, e.g. 512M.")
@click.option("--alias", default=None, help="Model id shown to clients [default: MODEL's name].")
@click.option("--drain-timeout", default=30.0, show_default=True, type=click.FloatRange(0),
              help="Seconds a stopping replica's requests (streams included) get to finish.")
def command(model, replicas, threads, num_cpus, host, port, address, api_key, api_key_file,
            parallel, ctx_size, kv_memory, alias, drain_timeout):
    """Serve MODEL (a .gguf path on every node, or a known model name) from several replicas
    on Ray Serve, with edgellm serve's OpenAI-compatible routes. Needs `pip install
    "edgellm[ray]"`."""
    try:
        from edgellm.integrations import ray_serve
    except ImportError as e:
        raise click.ClickException(str(e)) from None
    from edgellm.server import ServerConfig

    config = ServerConfig(model=model, alias=alias, api_key=_read_key(api_key, api_key_file),
                          parallel=parallel, max_queue=0, ctx_size=ctx_size, kv_memory=kv_memory)
    app = ray_serve.build(config, num_replicas=replicas, n_threads=threads, num_cpus=num_cpus,
                          graceful_shutdown_timeout_s=drain_timeout)
    click.echo(f"edgellm: {replicas} replica(s) of {config.model_id} on Ray Serve, "
               f"http://{host}:{port}/v1", err=True)
    ray_serve.run(app, host=host, port=port, address=address, blocking=True)
