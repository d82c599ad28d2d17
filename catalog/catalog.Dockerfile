# The catalog image for engines that build Dockerfiles; `make images` builds
# the same image (opm plus /configs) without one.
FROM quay.io/operator-framework/opm:v1.74.0
ENTRYPOINT ["/bin/opm"]
CMD ["serve", "/configs", "--cache-dir=/tmp/cache", "--cache-enforce-integrity=false"]
ADD configs /configs
LABEL operators.operatorframework.io.index.configs.v1=/configs
