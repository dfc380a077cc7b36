"""edgellm.integrations.ray_serve on a local Ray cluster the test starts (loopback only): two
SmolLM2 replicas with one compute thread each behind Ray Serve's HTTP proxy.

- 16 concurrent streaming chat requests all complete, with the same greedy text, and both
  replicas answered some (the x-edgellm-replica header each response carries).
- Killing one replica mid-run (ray.kill on its actor) loses no request that had not started
  streaming. "Started" means: its response headers came back from the killed replica. Every
  other request -- queued in Ray's router at the kill, or sent to the killed replica but not
  yet answered -- must complete with a full stream ending in [DONE]. The client retries a
  request that failed before any response came back from a replica (a connection error, or a
  proxy's 5xx without the replica header), and one a live replica answered 408
  `request_timeout` (Ray can re-route a request whose body the dying replica had already
  read; the live replica then never gets the body), as the OpenAI SDK does on 408, 5xx and
  connection errors; a started request whose replica died must end visibly broken, never as
  a complete stream.
- Redeploying (serve.run again, now with one replica) while streams run on both replicas
  drains: Ray replaces the replicas (each Python deploy is a new version), the old ones get no
  new requests and finish their streams before they go; no stream breaks.
- The ASGI wrapper's lifespan fails start-up when the model cannot be loaded (no cluster needed).

Seen on a 2-core machine: the killed replica holds one started stream (it breaks) and a few
admitted requests that had not answered yet; the proxy fails those with a 5xx and the retry
lands them on the live replica; everything still queued in Ray's router goes there directly.

Loopback: the node address is 127.0.0.1 and the HTTP proxy listens on 127.0.0.1 only; Ray's own
gRPC services still listen on every interface (Ray has no option against it), guarded by the
cluster's token authentication.

Skipped without ray; EDGELLM_REQUIRE_RAY=1 (CI) makes a missing ray a failure.
"""
import asyncio
import json
import os
import socket
import time
from pathlib import Path

import pytest

from conftest import _missing, require_model

REPO = Path(__file__).resolve().parent.parent

try:
    import ray
    from ray import serve
except ImportError:
    ray = None


def _need_ray():
    if ray is None:
        _missing("ray is not installed: pip install \"edgellm[ray]\"", "EDGELLM_REQUIRE_RAY")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROMPT = [{"role": "user", "content": "Count from one to twenty in words."}]


@pytest.fixture(scope="module")
def cluster():
    _need_ray()
    model = require_model("smollm2")
    import edgellm
    from edgellm.integrations import ray_serve
    from edgellm.server import ServerConfig

    # the replicas are Ray worker processes: they import edgellm the way this process does
    env = {"RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join([str(Path(edgellm.__file__).parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    if os.environ.get("EDGELLM_BUILD_DIR"):
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(os.environ["EDGELLM_BUILD_DIR"])
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    port = _free_port()
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, runtime_env={"env_vars": env})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # read_timeout: a re-routed request whose body is gone is answered 408 after 10 s
        # (the default 30 s only makes the kill test slower)
        config = ServerConfig(model=str(model), alias="smollm2", parallel=4, max_queue=0,
                              ctx_size=512, kv_memory=16 << 20, read_timeout=10.0)

        def deploy(num_replicas):
            serve.run(ray_serve.build(config, num_replicas=num_replicas, n_threads=1,
                                      graceful_shutdown_timeout_s=60, health_check_period_s=2),
                      name="edgellm", route_prefix="/")

        deploy(2)
        yield f"http://127.0.0.1:{port}", deploy
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class Stream:
    """One streaming chat request's fate as the client saw it."""

    def __init__(self, i: int):
        self.i = i
        self.replica = None      # the replica whose headers came back (None: none came)
        self.text = ""
        self.done = False        # "data: [DONE]" arrived
        self.finish = None
        self.error = None
        self.attempts = 0


async def _stream(client, s: Stream, max_tokens: int, retries: int = 3):
    import httpx

    body = {"model": "smollm2", "messages": PROMPT, "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    while True:
        s.attempts += 1
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                replica = r.headers.get("x-edgellm-replica")
                if replica is None or r.status_code >= 500:
                    # not answered by a replica: nothing started, so it may be sent again
                    await r.aread()
                    raise httpx.TransportError(f"{r.status_code} from the proxy")
                if r.status_code == 408:
                    # the replica never got the body (nothing generated): sent again, as the
                    # OpenAI SDKs retry 408
                    body_ = json.loads(await r.aread())
                    assert body_["error"]["code"] == "request_timeout", body_
                    raise httpx.TransportError("408 request_timeout from a replica")
                s.replica = replica
                assert r.status_code == 200, (r.status_code, await r.aread())
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    if data == "[DONE]":
                        s.done = True
                        continue
                    choice = json.loads(data)["choices"][0]
                    s.text += choice["delta"].get("content") or ""
                    s.finish = choice.get("finish_reason") or s.finish
            return
        except (httpx.TransportError, httpx.StreamError) as e:
            if s.replica is not None or s.attempts > retries:
                s.error = e  # broke after it had started: not retried
                return
            await asyncio.sleep(0.2)


async def _run_all(base: str, n: int, max_tokens: int, during=None):
    import httpx

    streams = [Stream(i) for i in range(n)]
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(120.0)) as client:
        tasks = [asyncio.ensure_future(_stream(client, s, max_tokens)) for s in streams]
        if during is not None:
            await during(streams)
        await asyncio.gather(*tasks)
    return streams


@pytest.mark.real_model
@pytest.mark.slow
def test_sixteen_streams_over_two_replicas(cluster):
    base, _ = cluster
    streams = asyncio.run(_run_all(base, 16, max_tokens=24))
    for s in streams:
        assert s.error is None, (s.i, s.error)
        assert s.done and s.finish in ("length", "stop") and s.text.strip(), vars(s)
    # greedy decoding: every replica gives the same answer to the same prompt
    assert len({s.text for s in streams}) == 1, {s.text for s in streams}
    replicas = {s.replica for s in streams}
    assert len(replicas) == 2, replicas
    assert all(r.startswith("SERVE_REPLICA::edgellm#edgellm#") for r in replicas)


@pytest.mark.real_model
@pytest.mark.slow
def test_killing_a_replica_loses_no_request_that_had_not_started(cluster):
    killed = {}

    async def kill_one_mid_run(streams):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = [s for s in streams if s.replica is not None]
            waiting = [s for s in streams if s.replica is None]
            streaming = [s for s in started if s.text and not s.done]
            if streaming and waiting:
                victim = streaming[0].replica
                ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
                killed["replica"] = victim
                killed["started"] = {s.i for s in started if s.replica == victim}
                killed["waiting"] = {s.i for s in waiting}
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no moment with a replica streaming and requests still queued")

    base, _ = cluster
    streams = asyncio.run(_run_all(base, 16, max_tokens=48, during=kill_one_mid_run))
    victim = killed["replica"]
    assert killed["started"] and killed["waiting"], killed
    survivors = [s for s in streams if s.replica != victim]
    for s in survivors:  # never answered by the killed replica: each must be whole
        assert s.error is None, (s.i, s.error, killed)
        assert s.replica is not None, vars(s)
        assert s.done and s.finish in ("length", "stop") and s.text, vars(s)
    reference = survivors[0].text
    assert all(s.text == reference for s in survivors)
    # requests still queued at the kill went to the live replica
    assert killed["waiting"] & {s.i for s in survivors}, killed
    for s in streams:
        if s.replica == victim and s.done:
            # one that reached [DONE] before the kill is whole, never a truncated "success"
            assert s.error is None and s.finish in ("length", "stop") and s.text == reference, vars(s)
    broken = [s for s in streams if s.replica == victim and not s.done]
    assert broken, "the kill came mid-stream, so a stream on the killed replica must have broken"


def _running_replicas() -> set:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("SERVE_REPLICA::edgellm#")}


def _wait_running(n: int, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = serve.status().applications["edgellm"].deployments["edgellm"].replica_states
        if states.get("RUNNING", 0) == n and sum(states.values()) == n:
            return
        time.sleep(0.2)
    raise AssertionError(f"not {n} running replicas: {states}")


def _wait_routed(base: str, n: int, timeout: float = 90):
    """Until the proxy has sent requests to n distinct replicas: a replica Ray reports RUNNING
    reaches the proxy's router a moment later, and until then every request goes elsewhere."""
    import httpx

    seen = set()
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=base, timeout=10) as client:
        while time.monotonic() < deadline:
            try:
                r = client.get("/health")
                if r.headers.get("x-edgellm-replica"):
                    seen.add(r.headers["x-edgellm-replica"])
            except httpx.TransportError:
                pass
            if len(seen & _running_replicas()) >= n:
                return
            time.sleep(0.05)
    raise AssertionError(f"the proxy routed to {sorted(seen)}, not {n} running replicas")


@pytest.mark.real_model
@pytest.mark.slow
def test_redeploy_drains_streams_in_flight(cluster):
    """serve.run again (with one replica) while streams run on both replicas: the old replicas
    are stopped only after their streams finished (graceful_shutdown_timeout_s); none breaks."""
    base, deploy = cluster
    _wait_running(2)  # the replacement of the killed replica is up
    _wait_routed(base, 2)  # ... and the proxy sends it requests
    before = _running_replicas()
    seen = {}

    async def redeploy_mid_run(streams):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(s.done or s.error for s in streams):
            live = {s.replica for s in streams if s.text and not s.done}
            if len(live) == 2:
                seen["streaming"] = {s.i: s.replica for s in streams if s.text and not s.done}
                await asyncio.get_running_loop().run_in_executor(None, deploy, 1)
                return
            await asyncio.sleep(0.01)

    # Ray's router may put a whole batch on one replica (its queue-length view lags); a batch
    # that never had both replicas streaming at once is run again, up to 3 batches
    batches = []
    for _ in range(3):
        streams = asyncio.run(_run_all(base, 8, max_tokens=64, during=redeploy_mid_run))
        batches.append([(s.replica, s.attempts, s.done, len(s.text), repr(s.error)) for s in streams])
        if "streaming" in seen:
            break
    assert "streaming" in seen, f"never had streams running on both replicas: {batches}"
    for s in streams:
        assert s.error is None and s.done and s.finish in ("length", "stop"), vars(s)
    assert len({s.text for s in streams}) == 1
    _wait_running(1)
    after = _running_replicas()
    assert len(after) == 1 and not after & before, (before, after)  # both old ones stopped
    # each old replica had streams in flight when the redeploy began, and they completed
    assert set(seen["streaming"].values()) == before, (seen, before)
    assert all(streams[i].done and streams[i].error is None for i in seen["streaming"])


def test_replica_lifespan_fails_when_the_model_cannot_load():
    _need_ray()
    from uvicorn.config import Config
    from uvicorn.lifespan.on import LifespanOn

    from edgellm.integrations.ray_serve import REPLICA_HEADER, ReplicaApp
    from edgellm.server import ServerConfig, create_app

    def broken(config):
        raise FileNotFoundError("no such model: missing.gguf")

    async def start(app):
        lifespan = LifespanOn(Config(app, lifespan="on", log_config=None))
        await lifespan.startup()
        failed = lifespan.should_exit
        if not failed:
            await lifespan.shutdown()
        return failed, lifespan

    app = ReplicaApp(create_app(ServerConfig(model="missing.gguf"), loader=broken), "r1")
    failed, _ = asyncio.run(start(app))
    assert failed  # Ray then fails the replica instead of routing to it

    class Ready:
        def stats(self):
            return {}

        def close(self):
            pass

    app = ReplicaApp(create_app(ServerConfig(model="fake"), loader=lambda c: Ready()), "r2")

    async def health_after_start():
        import httpx
        lifespan = LifespanOn(Config(app, lifespan="on", log_config=None))
        await lifespan.startup()
        assert not lifespan.should_exit
        assert app.host.state == "ready"  # start-up completed only once loaded
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://x") as c:
            r = await c.get("/health")
        await lifespan.shutdown()
        return r

    r = asyncio.run(health_after_start())
    assert r.status_code == 200 and r.headers[REPLICA_HEADER] == "r2"


def test_cli_builds_the_deployment_it_is_asked_for(monkeypatch, tmp_path):
    _need_ray()
    from click.testing import CliRunner

    from edgellm.cli import main
    from edgellm.integrations import ray_serve

    seen = {}
    monkeypatch.setattr(ray_serve, "build", lambda config, **kw: seen.update(config=config, **kw) or "app")
    monkeypatch.setattr(ray_serve, "run", lambda app, **kw: seen.update(app=app, run=kw))
    key = tmp_path / "key"
    key.write_text("k1\n")
    r = CliRunner().invoke(main, ["ray-serve", "smollm2", "--replicas", "3", "--threads", "2",
                                  "--port", "8123", "--api-key-file", str(key), "--kv-memory", "64M",
                                  "--drain-timeout", "12"])
    assert r.exit_code == 0, r.output
    c = seen["config"]
    assert (c.model, c.api_key, c.kv_memory, c.parallel, c.max_queue) == ("smollm2", "k1", 64 << 20, 4, 0)
    assert seen["num_replicas"] == 3 and seen["n_threads"] == 2
    assert seen["graceful_shutdown_timeout_s"] == 12
    assert seen["app"] == "app" and seen["run"]["port"] == 8123 and seen["run"]["blocking"]
    r = CliRunner().invoke(main, ["ray-serve", "smollm2", "--replicas", "0"])
    assert r.exit_code == 2


def test_build_checks_its_arguments():
    _need_ray()
    from edgellm.integrations import ray_serve
    from edgellm.server import ServerConfig

    with pytest.raises(TypeError):
        ray_serve.build({"model": "smollm2"})
    for bad in ({"num_replicas": 0}, {"n_threads": -1}, {"num_cpus": 0}, {"max_ongoing_requests": True},
                {"graceful_shutdown_timeout_s": -1}):
        with pytest.raises(ValueError):
            ray_serve.build(ServerConfig(model="smollm2"), **bad)


def test_check_health_fails_unless_the_engine_serves():
    _need_ray()
    from types import SimpleNamespace

    from edgellm.integrations.ray_serve import EdgeLLMReplica

    class Engine:
        closed = False

        def stats(self):
            if self.closed:
                raise RuntimeError("the engine is closed")
            return {}

    engine = Engine()
    host = SimpleNamespace(state="ready", error=None, llm=engine)
    replica = SimpleNamespace(server_app=SimpleNamespace(state=SimpleNamespace(host=host)),
                              replica="r1")
    EdgeLLMReplica.check_health(replica)  # serving: healthy
    engine.closed = True
    with pytest.raises(RuntimeError, match="closed"):
        EdgeLLMReplica.check_health(replica)
    for state, error in (("loading", None), ("failed", OSError("bad file")), ("closed", None)):
        host.state, host.error = state, error
        with pytest.raises(RuntimeError, match=state):
            EdgeLLMReplica.check_health(replica)
