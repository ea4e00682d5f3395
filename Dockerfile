# syntax=docker/dockerfile:1
# The stormwatch agent image (the chart's image.repository).
#
#   docker build -t <your registry>/stormwatch:0.1.0 .
#
# Build stage: Debian bookworm with the README's set-up script (scripts/setup.sh: the same
# packages, from bookworm and bookworm-backports, that CI builds and tests with), then CMake.
# The BPF build dumps vmlinux.h from /sys/kernel/btf/vmlinux, so build on a host kernel with BTF
# (any kernel the agent can run on has it).
# Runtime stage: bookworm-slim plus exactly the library packages the binary links, at the
# versions it was built against (deploy/runtime-packages.sh reads them off the binary).
FROM debian:bookworm AS build
WORKDIR /src
# Packages first: this layer stays cached while the sources change.
COPY scripts/setup.sh scripts/fetch_debian.sh scripts/
RUN bash scripts/setup.sh
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build /build --target stormwatch -j"$(nproc)" \
 && mkdir -p /out \
 && strip --strip-debug -o /out/stormwatch /build/stormwatch \
 && bash deploy/runtime-packages.sh /out/stormwatch > /out/runtime-packages.txt \
 && /out/stormwatch --version

FROM debian:bookworm-slim
# bookworm-backports (libbpf1 1.4), as configured by setup.sh in the build stage.
COPY --from=build /etc/apt/sources.list.d/ /etc/apt/sources.list.d/
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/runtime-packages.txt \
      apt-get install -y -qq --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /out/stormwatch /usr/bin/stormwatch
# uid 0 with capabilities limited by the pod (see helm/stormwatch/values.yaml): Kubernetes gives
# added capabilities only to root processes.
USER 0:0
# metrics (--metrics-address), health probes (--health-address)
EXPOSE 9847 9848
ENTRYPOINT ["/usr/bin/stormwatch"]
