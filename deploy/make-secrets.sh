#!/bin/sh
# Makes the keys the compose file and the Kubernetes base read from files:
#
#   deploy/make-secrets.sh deploy/secrets        # compose
#   deploy/make-secrets.sh deploy/k8s/secrets    # kustomize (secretGenerator)
#
#   tool-exec.key      the API key a separate tool-exec presents (role tool-exec);
#                      the orchestrator registers it at start (--tool-exec-key-file)
#   secrets.key        32 random bytes in base64: encrypts provider API keys at rest
#   postgres-password  the PostgreSQL password (compose)
#
# A file that exists is kept. The directory is the owner's alone; the files are
# readable by all, because compose bind-mounts them into containers whose
# services run as uid 10001.
set -eu
dir=${1:?usage: make-secrets.sh DIR}
umask 077
mkdir -p "$dir"
random_b64url() { head -c "$1" /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_'; }
if [ ! -s "$dir/tool-exec.key" ]; then
  id=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf 'chorus_%s_%s\n' "$id" "$(random_b64url 32)" > "$dir/tool-exec.key"
fi
[ -s "$dir/secrets.key" ] || head -c 32 /dev/urandom | base64 > "$dir/secrets.key"
[ -s "$dir/postgres-password" ] || random_b64url 24 > "$dir/postgres-password"
chmod 0644 "$dir/tool-exec.key" "$dir/secrets.key" "$dir/postgres-password"
echo "keys in $dir: tool-exec.key secrets.key postgres-password"
