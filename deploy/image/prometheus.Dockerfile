# scps-prometheus on the local base image that build-prometheus.sh imports
# (rootfs.sh); a local FROM is never pulled.
ARG BASE
FROM ${BASE}
ARG VERSION
LABEL org.opencontainers.image.title=scps-prometheus org.opencontainers.image.version=${VERSION}
COPY --chown=10002:10002 data/ /var/lib/prometheus/
USER 10002:10002
WORKDIR /var/lib/prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/var/lib/prometheus", "--web.listen-address=:9090"]
