#!/usr/bin/env bash
# A local Kubernetes control plane on loopback for Trainyard's cluster tests.
#
#   tools/cluster.sh up [--nodes FILE]   start etcd, kube-apiserver and (if built)
#                                        kube-controller-manager; idempotent
#   tools/cluster.sh down [--purge]      stop them; --purge also deletes the state
#   tools/cluster.sh status              exit 0 iff the API server is ready
#   tools/cluster.sh env                 print `export KUBECONFIG=...`
#   tools/cluster.sh nodes FILE          apply Node objects (and their status)
#
# Binaries come from tools/build.sh (${TRAINYARD_TOOLS_DIR:-~/.cache/trainyard/tools}/bin).
# State (certs, etcd data, logs, pid files, kubeconfig) lives in
# ${TRAINYARD_CLUSTER_DIR:-~/.cache/trainyard/cluster}. Everything listens on
# 127.0.0.1 only. No kubelet, scheduler or container runtime: pods are never
# run. See docs/tools.md.
set -euo pipefail

TOOLS_DIR="${TRAINYARD_TOOLS_DIR:-$HOME/.cache/trainyard/tools}"
BIN_DIR="$TOOLS_DIR/bin"
STATE="${TRAINYARD_CLUSTER_DIR:-$HOME/.cache/trainyard/cluster}"
HOST=127.0.0.1
ETCD_PORT="${TRAINYARD_ETCD_PORT:-23791}"
ETCD_PEER_PORT="${TRAINYARD_ETCD_PEER_PORT:-23801}"
API_PORT="${TRAINYARD_APISERVER_PORT:-26443}"
KCM_PORT="${TRAINYARD_KCM_PORT:-26257}"
SERVICE_CIDR="${TRAINYARD_SERVICE_CIDR:-10.96.0.0/16}"
SERVICE_IP="${TRAINYARD_SERVICE_IP:-10.96.0.1}"   # first address of SERVICE_CIDR
# No kubelets report here, so the node lifecycle controller would mark every
# applied Node NotReady/unreachable after 40s; leave it off by default.
KCM_CONTROLLERS="${TRAINYARD_KCM_CONTROLLERS:-*,-node-lifecycle-controller}"
# How often the resource quota controller recounts every quota (kube's default, 5m0s). A quota
# created in the ~30 s before the controller discovers a new CRD (count/<crd> in spec.hard)
# stays "status unknown" until this recount, and the API server refuses those objects meanwhile.
QUOTA_SYNC_PERIOD="${TRAINYARD_QUOTA_SYNC_PERIOD:-5m0s}"
READY_TIMEOUT="${TRAINYARD_READY_TIMEOUT:-120}"
CONTEXT=trainyard-local
KUBECONFIG_FILE="$STATE/kubeconfig"
PKI="$STATE/pki"
LOGS="$STATE/logs"
RUN="$STATE/run"

log() { printf '%s\n' "$*" >&2; }
die() { log "cluster.sh: $*"; exit 1; }

kubectl_bin() {
  if [[ -x "$BIN_DIR/kubectl" ]]; then echo "$BIN_DIR/kubectl"
  elif command -v kubectl >/dev/null 2>&1; then command -v kubectl
  else die "no kubectl: run tools/build.sh kube-apiserver"
  fi
}
kc() { "$(kubectl_bin)" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# ----------------------------------------------------------------- processes
pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }
running() { local p; p="$(pid_of "$1")"; [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }

start_proc() { # name binary args...
  local name="$1"; shift
  mkdir -p "$LOGS" "$RUN"
  if running "$name"; then return 0; fi
  log "    starting $name (log: $LOGS/$name.log)"
  # setsid: own session, so a Ctrl-C in the calling shell does not stop it.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
}

stop_proc() {
  local name="$1" p i
  p="$(pid_of "$name")"
  if [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    log "    stopped $name (pid $p)"
  fi
  rm -f "$RUN/$name.pid"
}

port_busy() { # true if something (not ours) listens on the port
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

wait_for() { # description timeout-seconds command...
  local what="$1" timeout="$2" start=$SECONDS; shift 2
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS - start >= timeout )); then return 1; fi
    sleep 0.5
  done
}

# -------------------------------------------------------------------- certs
gen_certs() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  [[ -f "$PKI/admin.crt" && -f "$PKI/kcm.crt" && -f "$PKI/sa.pub" ]] && return 0
  log "    generating certificates in $PKI"
  local o=(openssl); local days=3650
  ( cd "$PKI"
    "${o[@]}" req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days $days \
      -subj "/CN=trainyard-local-ca" 2>/dev/null
    cat > apiserver.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > client.ext
    issue() { # name subject extfile
      "${o[@]}" req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      "${o[@]}" x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" \
        -days $days -extfile "$3" 2>/dev/null
      rm -f "$1.csr"
    }
    issue apiserver "/CN=kube-apiserver" apiserver.ext
    issue admin "/O=system:masters/CN=trainyard-admin" client.ext
    issue kcm "/CN=system:kube-controller-manager" client.ext
    # Service-account token signing key pair.
    "${o[@]}" genrsa -out sa.key 2048 2>/dev/null
    "${o[@]}" rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

write_kubeconfig() { # file user cert key
  local file="$1" user="$2" cert="$3" key="$4"
  cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CONTEXT
  cluster:
    server: https://$HOST:$API_PORT
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$cert")
    client-key-data: $(base64 -w0 < "$key")
contexts:
- name: $CONTEXT
  context:
    cluster: $CONTEXT
    user: $user
current-context: $CONTEXT
EOF
  chmod 600 "$file"
}

# ------------------------------------------------------------------ health
api_ready() {
  curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$HOST:$API_PORT/readyz" 2>/dev/null | grep -q '^ok$'
}
etcd_healthy() { curl -fsS --max-time 3 "http://$HOST:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
kcm_healthy() { curl -fsSk --max-time 3 "https://$HOST:$KCM_PORT/healthz" 2>/dev/null | grep -q '^ok$'; }
have_kcm() { [[ -x "$BIN_DIR/kube-controller-manager" ]]; }

healthy() {
  running etcd && running kube-apiserver && api_ready || return 1
  if have_kcm; then running kube-controller-manager && kcm_healthy || return 1; fi
}

# ----------------------------------------------------------------- commands
cmd_up() {
  local nodes=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --nodes) nodes="${2:?--nodes needs a file}"; shift 2 ;;
      --nodes=*) nodes="${1#--nodes=}"; shift ;;
      *) die "up: unknown argument $1" ;;
    esac
  done
  [[ -z "$nodes" || -f "$nodes" ]] || die "no such nodes file: $nodes"
  local start=$SECONDS
  if healthy; then
    log "cluster already up ($KUBECONFIG_FILE, context $CONTEXT)"
  else
    for b in etcd kube-apiserver; do
      [[ -x "$BIN_DIR/$b" ]] || die "$BIN_DIR/$b missing: run tools/build.sh first"
    done
    command -v openssl >/dev/null || die "openssl is required"
    command -v curl >/dev/null || die "curl is required"
    log "==> starting local control plane in $STATE"
    mkdir -p "$STATE" "$LOGS" "$RUN"
    gen_certs

    if ! running etcd; then
      port_busy "$ETCD_PORT" && die "port $HOST:$ETCD_PORT is in use by another process (set TRAINYARD_ETCD_PORT)"
      start_proc etcd "$BIN_DIR/etcd" --name trainyard --data-dir "$STATE/etcd" \
        --listen-client-urls "http://$HOST:$ETCD_PORT" --advertise-client-urls "http://$HOST:$ETCD_PORT" \
        --listen-peer-urls "http://$HOST:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://$HOST:$ETCD_PEER_PORT" \
        --initial-cluster "trainyard=http://$HOST:$ETCD_PEER_PORT" --initial-cluster-state new \
        --unsafe-no-fsync --log-level warn
    fi
    wait_for etcd 30 etcd_healthy || die "etcd did not become healthy; see $LOGS/etcd.log"

    if ! running kube-apiserver; then
      port_busy "$API_PORT" && die "port $HOST:$API_PORT is in use by another process (set TRAINYARD_APISERVER_PORT)"
      start_proc kube-apiserver "$BIN_DIR/kube-apiserver" \
        --etcd-servers "http://$HOST:$ETCD_PORT" \
        --bind-address "$HOST" --advertise-address "$HOST" --secure-port "$API_PORT" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
        --service-cluster-ip-range "$SERVICE_CIDR" \
        --authorization-mode Node,RBAC \
        --enable-admission-plugins NamespaceLifecycle,ServiceAccount,NodeRestriction,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,MutatingAdmissionWebhook,ResourceQuota,LimitRanger \
        --allow-privileged=true \
        --endpoint-reconciler-type none \
        --profiling=false \
        --v=1
    fi
    wait_for kube-apiserver "$READY_TIMEOUT" api_ready \
      || die "kube-apiserver not ready after ${READY_TIMEOUT}s; see $LOGS/kube-apiserver.log"
    write_kubeconfig "$KUBECONFIG_FILE" trainyard-admin "$PKI/admin.crt" "$PKI/admin.key"

    if have_kcm; then
      if ! running kube-controller-manager; then
        port_busy "$KCM_PORT" && die "port $HOST:$KCM_PORT is in use by another process (set TRAINYARD_KCM_PORT)"
        write_kubeconfig "$STATE/kcm.kubeconfig" system:kube-controller-manager "$PKI/kcm.crt" "$PKI/kcm.key"
        start_proc kube-controller-manager "$BIN_DIR/kube-controller-manager" \
          --kubeconfig "$STATE/kcm.kubeconfig" \
          --authentication-kubeconfig "$STATE/kcm.kubeconfig" --authorization-kubeconfig "$STATE/kcm.kubeconfig" \
          --bind-address "$HOST" --secure-port "$KCM_PORT" \
          --leader-elect=false \
          --controllers "$KCM_CONTROLLERS" \
          --resource-quota-sync-period "$QUOTA_SYNC_PERIOD" \
          --use-service-account-credentials=true \
          --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
          --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
          --service-cluster-ip-range "$SERVICE_CIDR" \
          --profiling=false \
          --v=1
      fi
      wait_for kube-controller-manager 60 kcm_healthy \
        || die "kube-controller-manager not healthy; see $LOGS/kube-controller-manager.log"
    else
      log "    kube-controller-manager not built: namespaces will not finalize, no garbage collection"
    fi
    log "==> cluster up in $((SECONDS - start))s: $(kc version -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1) at https://$HOST:$API_PORT"
    log "    export KUBECONFIG=$KUBECONFIG_FILE   (context $CONTEXT)"
  fi
  if [[ -n "$nodes" ]]; then cmd_nodes "$nodes"; fi
}

# Apply Node objects, then write each one's .status through the status
# subresource (a plain create/apply drops status for Nodes).
cmd_nodes() {
  local file="${1:?nodes FILE}"
  [[ -f "$file" ]] || die "no such nodes file: $file"
  command -v python3 >/dev/null || die "python3 is required to patch node status"
  log "==> applying nodes from $file"
  kc apply --server-side --force-conflicts --field-manager trainyard-cluster -f "$file" >&2
  local json
  json="$(kc create --dry-run=client -o json -f "$file")"
  python3 -c '
import json, sys
text, dec, pos, items = sys.stdin.read(), json.JSONDecoder(), 0, []
while True:  # kubectl prints one JSON document per object, or a List
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    doc, pos = dec.raw_decode(text, pos)
    items.extend(doc.get("items", []) if doc.get("kind") == "List" else [doc])
for it in items:
    if it.get("kind") == "Node" and it.get("status"):
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in it["status"].get("conditions", []))
        print(it["metadata"]["name"] + "\t" + json.dumps({"status": it["status"]}) + "\t" + str(ready).lower())
' <<<"$json" | while IFS=$'\t' read -r name patch ready; do
    kc patch node "$name" --subresource=status --type=merge -p "$patch" >&2
    # The TaintNodesByCondition admission plugin puts not-ready:NoSchedule on every new Node, and
    # no node lifecycle controller runs here to lift it once the (fake) Ready condition is set.
    if [[ "$ready" == true ]]; then
      kc taint node "$name" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
    fi
  done
}

cmd_down() {
  local purge=0
  [[ "${1:-}" == "--purge" ]] && purge=1
  log "==> stopping local control plane ($STATE)"
  stop_proc kube-controller-manager
  stop_proc kube-apiserver
  stop_proc etcd
  if [[ $purge == 1 ]]; then
    rm -rf "$STATE"
    log "    removed $STATE"
  fi
}

cmd_status() {
  local n ok=0
  for n in etcd kube-apiserver kube-controller-manager; do
    if running "$n"; then log "$n: running (pid $(pid_of "$n"))"; else log "$n: stopped"; fi
  done
  if [[ -f "$PKI/admin.crt" ]] && api_ready; then log "apiserver: ready at https://$HOST:$API_PORT"; else log "apiserver: not ready"; ok=1; fi
  if have_kcm && running kube-controller-manager && ! kcm_healthy; then log "kube-controller-manager: unhealthy"; ok=1; fi
  log "kubeconfig: $KUBECONFIG_FILE (context $CONTEXT)"
  return $ok
}

cmd_env() {
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
}

main() {
  local cmd="${1:-}"; shift || true
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status ;;
    env) cmd_env ;;
    nodes) cmd_nodes "$@" ;;
    -h|--help|help|"") sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (up|down|status|env|nodes)" ;;
  esac
}

main "$@"; exit $?
