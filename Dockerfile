# The broker's image. Its base is made on this machine (`compose/stack.sh base`: a Debian bookworm
# root from debootstrap, `docker import`ed as kbroker-base:bookworm, with python3, python3-venv
# and etcd-server in it), since no public image registry is reachable. Python packages come
# from PyPI during the build; `compose/stack.sh build` puts the host's CA certificates in
# .build-ca/ first (never committed) so that a TLS-inspecting proxy is trusted by pip and apt.
ARG BASE_IMAGE=kbroker-base:bookworm
FROM ${BASE_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PATH=/opt/kbroker/bin:$PATH

# The host's CAs: its local ones become the image's, and its bundle is appended to the image's.
COPY .build-ca/ /tmp/build-ca/
RUN set -e; cp /tmp/build-ca/*.crt /usr/local/share/ca-certificates/ 2>/dev/null || true; \
    update-ca-certificates >/dev/null; \
    if [ -s /tmp/build-ca/host-bundle.pem ]; then cat /tmp/build-ca/host-bundle.pem >> /etc/ssl/certs/ca-certificates.crt; fi; \
    rm -rf /tmp/build-ca

# A plain bookworm base works too: what the made base already has is not installed again.
RUN set -e; if ! command -v etcd >/dev/null || ! python3 -c "import venv, ensurepip" 2>/dev/null; then \
      apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv etcd-server \
      && rm -rf /var/lib/apt/lists/*; fi

# Dependencies first (a layer kept while only the source changes), then the project itself.
COPY pyproject.toml README.md /src/
RUN set -e; python3 -m venv /opt/kbroker; \
    python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/src/pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt; \
    pip install -q -r /tmp/requirements.txt
COPY protocol /src/protocol
COPY storage /src/storage
COPY metadata /src/metadata
COPY coordinator /src/coordinator
COPY security /src/security
COPY broker /src/broker
COPY tools /src/tools
COPY pipeline /src/pipeline
COPY kbroker /src/kbroker
COPY _build /src/_build
COPY setup.py MANIFEST.in /src/
RUN pip install -q --no-deps /src && rm -rf /src/build

COPY compose/broker.properties /etc/kbroker/server.properties
RUN mkdir -p /var/lib/kbroker /var/lib/etcd
WORKDIR /var/lib/kbroker
EXPOSE 9092 19092
CMD ["kbroker", "/etc/kbroker/server.properties"]
