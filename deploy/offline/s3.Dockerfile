# A stand-in for MinIO where its image cannot be pulled: moto's S3 server (the version uv.lock pins for
# the tests), on port 9000, for deploy/offline/docker-compose.offline.yml. It speaks the S3 API the
# payload store uses; it does not check credentials or policies (MinIO does: docker-compose.yml's
# minio-setup gives each service its own user). moto keeps objects in memory: the override records
# every request in /data (MinIO's volume) and replays them when the stack comes up again, so blobs
# survive `down` and `up` as MinIO's do.
#   docker build --network host -f deploy/offline/s3.Dockerfile -t deerflow-s3-standin:offline .
ARG BASE_IMAGE=deerflow-base:bookworm-python3.11
FROM ${BASE_IMAGE}
ARG BUILD_CA_CERTS=""
COPY pyproject.toml uv.lock /build/
COPY deploy/locked.py /build/deploy/locked.py
RUN cat /etc/ssl/certs/ca-certificates.crt > /build/ca.pem \
    && printf '%s\n' "$BUILD_CA_CERTS" >> /build/ca.pem \
    && python3 /build/deploy/locked.py /build/uv.lock uv > /build/uv.txt \
    && python3 -m venv /opt/s3 \
    && /opt/s3/bin/pip install --quiet --no-cache-dir --cert /build/ca.pem --no-deps --require-hashes -r /build/uv.txt \
    && cd /build \
    && SSL_CERT_FILE=/build/ca.pem /opt/s3/bin/uv export --quiet --frozen --extra test --no-emit-project \
        --no-hashes -o /build/constraints.txt \
    && SSL_CERT_FILE=/build/ca.pem /opt/s3/bin/uv pip install --quiet --no-cache --python /opt/s3/bin/python \
        -c /build/constraints.txt "moto[server]" \
    && /opt/s3/bin/uv pip uninstall --quiet --python /opt/s3/bin/python uv \
    && rm -rf /build \
    && mkdir /data && chown 1000:1000 /data
USER 1000:1000
EXPOSE 9000
ENTRYPOINT ["/opt/s3/bin/moto_server", "-H", "0.0.0.0", "-p", "9000"]
