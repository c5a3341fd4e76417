"""The double's HTTP layer: the `/api/v1/` endpoints tinker SDK 0.38 calls, with faults.

Requests are read with the SDK's own request types (`tinker.types.*Request`) and answered with
its response types, JSON or protobuf (`wire`). Most calls answer a future (`{request_id}`) that
`retrieve_future` resolves: it holds the poll up to `hold` seconds, then answers
`{"type": "try_again"}` (the SDK polls again at once), an error
(`{"error", "category"}`), the JSON result, or protobuf for sample and forward_backward.

Every request needs `X-API-Key` equal to the double's key (a `tml-` key, as the SDK demands).
`/_double/*` (no key) reads the record and sets faults, for a double in another process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import tinker
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from tinker import types

from . import wire
from .faults import Faults
from .service import DoubleService, ServiceError

PREFIX = "/api/v1/"
PROTOBUF = "application/x-protobuf"


def _endpoint(path: str) -> str:
    """`/api/v1/training_runs/x/checkpoints/y` -> `training_runs`; `/api/v1/optim_step` ->
    `optim_step`; `/api/v1/client/config` -> `client/config`."""
    rest = path.removeprefix(PREFIX)
    if rest.startswith("client/"):
        return rest
    return rest.split("/")[0]


def _json(value: Any, status: int = 200) -> JSONResponse:
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json", exclude_none=True)
    return JSONResponse(value, status_code=status)


def create_app(service: DoubleService, *, api_key: str, hold: float = 1.0) -> FastAPI:
    app = FastAPI(title="tinker service double")
    # What a hung endpoint waits on: set only when the double stops (`release_hung`), so
    # the server's shutdown does not have to cancel those requests (a traceback each).
    hung = asyncio.Event()
    app.state.release_hung = lambda: None

    @app.middleware("http")
    async def faults_and_auth(request: Request, call_next: Any) -> Any:
        path = request.url.path
        if not path.startswith(PREFIX):
            return await call_next(request)
        endpoint = _endpoint(path)
        faults = service.faults
        if request.headers.get("x-api-key") != api_key:
            response: Any = _json({"detail": "invalid API key"}, 401)
        elif endpoint in faults.hang:
            loop = asyncio.get_running_loop()
            app.state.release_hung = lambda: loop.call_soon_threadsafe(hung.set)
            await hung.wait()
            response = _json({"detail": "the double is stopping"}, 503)
        else:
            if endpoint in faults.delay:
                await asyncio.sleep(faults.delay[endpoint])
            burst = faults.fail.get(endpoint)
            if burst is not None and burst.take():
                headers = (
                    {"Retry-After": f"{burst.retry_after:g}"}
                    if burst.retry_after is not None
                    else None
                )
                response = JSONResponse(
                    {"detail": f"injected {burst.status}"},
                    status_code=burst.status,
                    headers=headers,
                )
            else:
                try:
                    response = await call_next(request)
                except ServiceError as exc:  # raised past FastAPI's own handling
                    response = _json({"detail": exc.detail}, exc.status)
        service.calls.append((request.method, path.removeprefix(PREFIX), response.status_code))
        return response

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _json({"detail": exc.detail}, exc.status)

    @app.exception_handler(pydantic.ValidationError)
    async def bad_body(_: Request, exc: pydantic.ValidationError) -> JSONResponse:
        return _json({"detail": f"bad request body: {exc}"}, 400)

    @app.exception_handler(wire.WireError)
    async def bad_wire(_: Request, exc: wire.WireError) -> JSONResponse:
        return _json({"detail": str(exc)}, 400)

    async def body(request: Request, model: type[pydantic.BaseModel]) -> Any:
        return model.model_validate(await request.json())

    # -- client set-up and session life ------------------------------------------------
    @app.post(PREFIX + "client/config")
    async def client_config(request: Request) -> Any:
        await body(request, types.ClientConfigRequest)
        return _json(types.ClientConfigResponse())

    @app.post(PREFIX + "client/dynamic_config")
    async def client_dynamic_config(request: Request) -> Any:
        await body(request, types.ClientConfigRequest)
        return _json(types.ClientDynamicConfigResponse())

    @app.post(PREFIX + "create_session")
    async def create_session(request: Request) -> Any:
        return _json(service.create_session(await body(request, types.CreateSessionRequest)))

    @app.post(PREFIX + "session_heartbeat")
    async def session_heartbeat(request: Request) -> Any:
        service.heartbeat((await body(request, types.SessionHeartbeatRequest)).session_id)
        return _json(types.SessionHeartbeatResponse())

    @app.post(PREFIX + "sessions/{session_id}/finish")
    async def finish_session(session_id: str, request: Request) -> Any:
        service.finish(session_id, await request.json())
        return Response(status_code=200)

    @app.post(PREFIX + "telemetry")
    async def telemetry(request: Request) -> Any:
        await request.body()
        return _json({"status": "accepted"})

    @app.get(PREFIX + "healthz")
    async def healthz() -> Any:
        return _json({"status": "ok"})

    @app.get(PREFIX + "get_server_capabilities")
    async def capabilities() -> Any:
        return _json(service.capabilities())

    # -- training ------------------------------------------------------------------------
    @app.post(PREFIX + "create_model")
    async def create_model(request: Request) -> Any:
        return _json(service.create_model(await body(request, types.CreateModelRequest)))

    @app.post(PREFIX + "get_info")
    async def get_info(request: Request) -> Any:
        return _json(service.get_info((await body(request, types.GetInfoRequest)).model_id))

    @app.post(PREFIX + "forward_backward")
    async def forward_backward(request: Request) -> Any:
        raw = await request.body()
        if request.headers.get("content-encoding") == "zstd":
            import zstandard

            raw = zstandard.ZstdDecompressor().decompress(raw)
        parsed, forward_only = wire.forward_backward_request(raw)
        return _json(service.forward_backward(parsed, forward_only))

    @app.post(PREFIX + "optim_step")
    async def optim_step(request: Request) -> Any:
        return _json(service.optim_step(await body(request, types.OptimStepRequest)))

    @app.post(PREFIX + "save_weights")
    async def save_weights(request: Request) -> Any:
        return _json(service.save_weights(await body(request, types.SaveWeightsRequest)))

    @app.post(PREFIX + "save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request) -> Any:
        return _json(
            service.save_weights_for_sampler(
                await body(request, types.SaveWeightsForSamplerRequest)
            )
        )

    @app.post(PREFIX + "save_weights_external")
    async def save_weights_external(request: Request) -> Any:
        return _json(
            service.save_weights_external(await body(request, types.SaveWeightsExternalRequest))
        )

    @app.post(PREFIX + "load_weights")
    async def load_weights(request: Request) -> Any:
        return _json(service.load_weights(await body(request, types.LoadWeightsRequest)))

    # -- sampling ------------------------------------------------------------------------
    @app.post(PREFIX + "create_sampling_session")
    async def create_sampling_session(request: Request) -> Any:
        return _json(
            service.create_sampling_session(await body(request, types.CreateSamplingSessionRequest))
        )

    @app.get(PREFIX + "samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> Any:
        return _json(await service.get_sampler(sampler_id))

    @app.post(PREFIX + "asample")
    async def asample(request: Request) -> Any:
        return _json(await service.asample(await body(request, types.SampleRequest)))

    # -- futures -------------------------------------------------------------------------
    @app.post(PREFIX + "retrieve_future")
    async def retrieve_future(request: Request) -> Any:
        request_id = (await body(request, types.FutureRetrieveRequest)).request_id
        pending = service.pending(request_id)
        stuck = pending.kind in service.faults.stuck_futures
        if not stuck:
            try:
                await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(pending.future)), timeout=hold
                )
            except TimeoutError:
                pass
            except Exception:  # the request failed: answered below
                pass
        if stuck or not pending.future.done():
            if stuck:
                await asyncio.sleep(hold)
            return _json(
                {
                    "type": "try_again",
                    "request_id": request_id,
                    "queue_state": "paused_capacity" if stuck else "active",
                    "queue_state_reason": "the double holds this request" if stuck else None,
                }
            )
        error = pending.future.exception()
        if error is not None:
            user = isinstance(
                error,
                tinker.BadRequestError
                | tinker.NotFoundError
                | tinker.ConflictError
                | ValueError
                | TypeError,
            )
            return _json(
                {
                    "error": f"{type(error).__name__}: {error}",
                    "category": "user" if user else "server",
                }
            )
        result = pending.future.result()
        if isinstance(result, types.SampleResponse):
            return Response(wire.sample_response(result), media_type=PROTOBUF)
        if isinstance(result, types.ForwardBackwardOutput):
            return Response(wire.forward_backward_output(result), media_type=PROTOBUF)
        return _json(result)

    # -- checkpoints ---------------------------------------------------------------------
    @app.post(PREFIX + "weights_info")
    async def weights_info(request: Request) -> Any:
        return _json(service.weights_info((await request.json())["tinker_path"]))

    @app.get(PREFIX + "training_runs/{training_run_id}")
    async def training_run(training_run_id: str) -> Any:
        return _json(service.training_run(training_run_id))

    @app.get(PREFIX + "training_runs/{training_run_id}/checkpoints")
    async def list_checkpoints(training_run_id: str) -> Any:
        return _json(service.list_checkpoints(training_run_id))

    @app.get(
        PREFIX + "training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}"
        "/external_weights_urls"
    )
    async def external_weights_urls(
        training_run_id: str, checkpoint_id: str, request: Request
    ) -> Any:
        path = f"tinker://{training_run_id}/{checkpoint_id}"
        files = service.external_files(path)
        root = str(request.base_url).rstrip("/")
        return _json(
            types.ExternalWeightsUrlsResponse(
                urls={
                    name: f"{root}/_double/files/{training_run_id}/{checkpoint_id}/{name}"
                    for name in files
                },
                expires=datetime.now(UTC) + timedelta(hours=1),
            )
        )

    @app.get("/_double/files/{training_run_id}/{checkpoint_id:path}/{name}")
    async def external_file(training_run_id: str, checkpoint_id: str, name: str) -> Any:
        """A signed URL's download (the double signs nothing: it is a local test server)."""
        files = service.external_files(f"tinker://{training_run_id}/{checkpoint_id}")
        if name not in files:
            raise ServiceError(404, f"no file {name}")
        return Response(files[name].read_bytes(), media_type="application/octet-stream")

    @app.delete(PREFIX + "training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(training_run_id: str, checkpoint_id: str) -> Any:
        service.delete_checkpoint(training_run_id, checkpoint_id)
        return Response(status_code=200)

    # -- billing ---------------------------------------------------------------------------
    @app.get(PREFIX + "billing/usage/events")
    async def billing_usage(starting_on: str, ending_before: str) -> Any:
        window = types.GetBillingUsageRequest.model_validate(
            {"starting_on": starting_on, "ending_before": ending_before}
        )
        return _json(service.billing_usage(window.starting_on, window.ending_before))

    # -- the double's own controls ------------------------------------------------------
    @app.get("/_double/record")
    async def record() -> Any:
        return _json(
            {
                "calls": service.calls,
                "deleted": service.deleted,
                "inflight_saves": [dataclasses.asdict(s) for s in service.inflight_saves],
                "inflight_samples": [dataclasses.asdict(s) for s in service.inflight_samples],
                "clock_cycle": service.clock.period,
                "cycles": service.clock.cycles,
                "sessions": {
                    s.session_id: {"heartbeats": s.heartbeats, "finished": s.finished}
                    for s in service.sessions.values()
                },
                "time": time.time(),
            }
        )

    @app.post("/_double/faults")
    async def set_faults(request: Request) -> Any:
        service.faults = Faults.from_dict(await request.json())
        return _json(service.faults.as_dict())

    return app
