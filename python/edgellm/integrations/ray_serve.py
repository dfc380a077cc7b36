"""Scale-out on Ray Serve: replicas of `edgellm serve`'s OpenAI app behind Ray Serve's proxy.

    from edgellm.integrations import ray_serve
    from edgellm.server import ServerConfig
    app = ray_serve.build(ServerConfig(model="smollm2"), num_replicas=2, n_threads=2)
    ray_serve.run(app, host="127.0.0.1", port=8000)      # or serve.run(app) yourself

Each replica is one Ray actor holding one AsyncLLM and the very ASGI app `edgellm serve` runs
(edgellm.server.create_app: every route, streaming, auth, limits), given to Ray Serve as its
ingress (`serve.ingress()` with `__serve_build_asgi_app__`). What Ray adds:

- routing: the proxy sends a request to a replica with a free slot; `max_ongoing_requests`
  defaults to the replica's `--parallel`, so beyond that requests wait in Ray's router (not
  in one replica's queue) and go to whichever replica frees a slot first, including a
  replacement for one that died.
- readiness: a replica counts as started only once its model is loaded (its ASGI lifespan
  start-up waits for the load; a load failure fails the replica), and `check_health` fails
  when the engine is not serving, so Ray replaces it.
- graceful drain: a replica being stopped (scale-down, redeploy, shutdown) gets no new
  requests and has `graceful_shutdown_timeout_s` for the ones it holds, streams included, to
  finish; then its engine is closed (whatever still runs ends "cancelled"). A `serve.run` of
  the application again, from Python, replaces every replica so (Ray gives each such deploy a
  new version), one at a time while the new ones start.

Every answer carries the header `x-edgellm-replica`: the replica's Ray actor name.
Ray is optional: `pip install "edgellm[ray]"`.
"""
import asyncio
import dataclasses
from typing import Any, Optional

try:
    from ray import serve
except ImportError as e:  # pragma: no cover - exercised only without ray
    raise ImportError("edgellm.integrations.ray_serve needs Ray Serve: "
                      "pip install \"edgellm[ray]\" (or \"ray[serve]\")") from e

from edgellm.server import ServerConfig, create_app

REPLICA_HEADER = "x-edgellm-replica"


class ReplicaApp:
    """The server's ASGI app as one replica runs it: lifespan start-up completes only once the
    model is loaded (failed if it could not be), and every response names the replica."""

    def __init__(self, app, replica: str, poll_s: float = 0.02):
        self.app = app
        self.host = app.state.host
        self.replica = replica.encode("latin-1")
        self.poll_s = poll_s

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, self._lifespan_send(send))
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def named(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), (REPLICA_HEADER.encode(), self.replica)]
            await send(message)

        return await self.app(scope, receive, named)

    def _lifespan_send(self, send):
        async def lifespan_send(message):
            if message["type"] == "lifespan.startup.complete":
                while self.host.state == "loading":  # create_app's lifespan loads in a thread
                    await asyncio.sleep(self.poll_s)
                if self.host.state != "ready":
                    message = {"type": "lifespan.startup.failed",
                               "message": f"edgellm: could not load {self.host.config.model}: "
                                          f"{self.host.error or self.host.state}"}
            await send(message)

        return lifespan_send


@serve.ingress()
class EdgeLLMReplica:
    """One replica: an AsyncLLM behind edgellm.server's app (the deployment `build` makes)."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.replica = serve.get_replica_context().replica_id.to_full_id_str()
        self.server_app = create_app(config)

    def __serve_build_asgi_app__(self):
        return ReplicaApp(self.server_app, self.replica)

    def check_health(self) -> None:
        """Ray calls this every `health_check_period_s`; raising marks the replica unhealthy."""
        host = self.server_app.state.host
        if host.state != "ready":
            raise RuntimeError(f"edgellm replica {self.replica}: engine is {host.state}"
                               + (f" ({host.error})" if host.error else ""))
        host.llm.stats()  # raises once the engine is closed


def build(config: ServerConfig, *, num_replicas: int = 1, n_threads: Optional[int] = None,
          num_cpus: Optional[float] = None, max_ongoing_requests: Optional[int] = None,
          graceful_shutdown_timeout_s: float = 30.0, health_check_period_s: float = 5.0,
          health_check_timeout_s: float = 30.0, name: str = "edgellm",
          ray_actor_options: Optional[dict] = None) -> Any:
    """The Ray Serve application: `num_replicas` replicas of `config`'s server.

    n_threads: compute threads per replica (ServerConfig.threads; None keeps config's, else the
    engine's choice); num_cpus: the CPUs Ray reserves per replica (default n_threads, else 1),
    so replicas on one node do not share cores. max_ongoing_requests: requests Ray sends one
    replica at once (default config.parallel). Returns what `serve.run` takes.
    """
    if not isinstance(config, ServerConfig):
        raise TypeError(f"config must be an edgellm.server.ServerConfig, got {type(config).__name__}")
    for label, v in (("num_replicas", num_replicas), ("n_threads", n_threads),
                     ("max_ongoing_requests", max_ongoing_requests)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{label} must be a positive int, got {v!r}")
    if num_cpus is not None and not num_cpus > 0:
        raise ValueError(f"num_cpus must be > 0, got {num_cpus!r}")
    if graceful_shutdown_timeout_s < 0 or health_check_period_s <= 0 or health_check_timeout_s <= 0:
        raise ValueError("graceful_shutdown_timeout_s must be >= 0 and the health check times > 0")
    if n_threads is not None:
        config = dataclasses.replace(config, threads=n_threads)
    actor_options = dict(ray_actor_options or {})
    actor_options.setdefault("num_cpus", num_cpus or config.threads or 1)
    deployment = serve.deployment(
        name=name, num_replicas=num_replicas, ray_actor_options=actor_options,
        max_ongoing_requests=max_ongoing_requests or config.parallel,
        graceful_shutdown_timeout_s=graceful_shutdown_timeout_s,
        graceful_shutdown_wait_loop_s=min(1.0, max(0.1, graceful_shutdown_timeout_s / 10)),
        health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s)(EdgeLLMReplica)
    return deployment.bind(config)


def run(app, *, host: str = "127.0.0.1", port: int = 8000, name: str = "edgellm",
        route_prefix: str = "/", blocking: bool = False, address: Optional[str] = None):
    """Start Ray (a local one unless `address` or RAY_ADDRESS names a cluster) and Serve's HTTP
    proxy on host:port, deploy `app` (from `build`) and return its handle; blocking=True
    serves until interrupted."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False)
    serve.start(http_options={"host": host, "port": port})
    return serve.run(app, name=name, route_prefix=route_prefix, blocking=blocking)
