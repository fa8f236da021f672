"""Probes and metrics: answered without a token (see ``PUBLIC_ROUTES``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from query_api.http.deps import ApiDeps
from query_api.http.strict_json import StrictJsonRoute

PUBLIC_ROUTES = ("/healthz", "/readyz", "/metrics")


def health_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(route_class=StrictJsonRoute)

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        """Liveness: 503 once this process cannot work again without a restart."""
        failed = deps.alive()
        if failed is not None:
            return JSONResponse({"status": "failed", "error": failed}, status_code=503)
        return JSONResponse({"status": "ok"})

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        report = await deps.readiness()
        return JSONResponse(report, status_code=200 if report.get("ready") else 503)

    @router.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(deps.queries.metrics.render(), media_type=deps.queries.metrics.content_type)

    return router
