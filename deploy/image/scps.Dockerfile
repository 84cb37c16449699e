# The scps image's programs layer on the local base image that build.sh
# imports (rootfs.sh); a local FROM is never pulled.
ARG BASE
FROM ${BASE}
ARG VERSION
LABEL org.opencontainers.image.title=scps org.opencontainers.image.version=${VERSION}
COPY usr/ /usr/
COPY --chown=10001:10001 home/ /var/lib/scps/
ENV PATH=/usr/local/bin:/usr/bin
USER 10001:10001
WORKDIR /var/lib/scps
EXPOSE 50051
ENTRYPOINT ["/usr/local/bin/scps-server"]
