#!/bin/sh
# Makes the keys the compose file and the Kubernetes base read from files:
#
#   deploy/make-secrets.sh deploy/secrets        # compose
#   deploy/make-secrets.sh deploy/k8s/secrets    # kustomize (secretGenerator)
#   deploy/make-secrets.sh deploy/k8s-replicas/secrets 'postgres://user:pass@host/db'
#                                                # the replicas' database URL
#
#   tool-exec.key      the API key a separate tool-exec presents (role tool-exec);
#                      the orchestrator registers it at start (--tool-exec-key-file)
#   secrets.key        32 random bytes in base64: encrypts provider API keys at rest
#   postgres-password  the PostgreSQL password (compose)
#   database-url       the database's URL, when one is given (written again
#                      each time: the URL given is the one kept)
#
# A file that exists is kept. The directory is the owner's alone; the files are
# readable by all, because compose bind-mounts them into containers whose
# services run as uid 10001.
set -eu
dir=${1:?usage: make-secrets.sh DIR [DATABASE_URL]}
url=${2:-}
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
made="tool-exec.key secrets.key postgres-password"
if [ -n "$url" ]; then
  case "$url" in
    postgres://*|postgresql://*) ;;
    *) echo "make-secrets.sh: '$url' is not a PostgreSQL URL (postgres://user:password@host/db)" >&2; exit 2 ;;
  esac
  printf '%s\n' "$url" > "$dir/database-url"
  chmod 0644 "$dir/database-url"
  made="$made database-url"
fi
echo "keys in $dir: $made"
