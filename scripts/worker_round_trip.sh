#!/usr/bin/env bash
# A Worker's round trip through the shell with nothing but curl, openssl and jq:
# open session → pull → starting → running → renew ×3 → completion.
# Usage: ORIGIN=https://127.0.0.1:8443 WORKER=<uuid> CERT=worker.crt KEY=worker.key CA=ca.crt \
#        bash scripts/worker_round_trip.sh
# The session is opened with the client certificate alone; every later call carries the ql3w
# signature: HMAC-SHA256(session key, "ql3w\nPOST\n<path>\n<sha256 hex of body>\n<unix seconds>").
set -euo pipefail
: "${ORIGIN:?}" "${WORKER:?}" "${CERT:?}" "${KEY:?}" "${CA:?}"
GEN=${GEN:-1}
CURL=(curl --silent --show-error --fail-with-body --tlsv1.3 --cacert "$CA" --cert "$CERT" --key "$KEY"
      -H 'Content-Type: application/json' -H 'Accept-Encoding: identity')

b64url_to_hex() { local s=$1; s=${s//-/+}; s=${s//_//}; while (( ${#s} % 4 )); do s+='='; done; printf %s "$s" | base64 -d | od -An -tx1 | tr -d ' \n'; }

base="/api/v3/workers/$WORKER/sessions"
opened=$("${CURL[@]}" -X POST "$ORIGIN$base" \
  -d "{\"schema\":\"qinglong/worker-session@v1\",\"capacity\":1,\"workerGeneration\":$GEN}")
session=$(jq -r .sessionId <<<"$opened")
key_hex=$(b64url_to_hex "$(jq -r .sessionKey <<<"$opened")")
echo "opened session $session (expires at $(jq -r .expiresAtMs <<<"$opened") ms)"

signed() {  # signed PATH BODY → the response body
  local path="$base/$session$1" body=$2 ts sig digest
  ts=$(date +%s)
  digest=$(printf %s "$body" | sha256sum | cut -d' ' -f1)
  sig=$(printf 'ql3w\nPOST\n%s\n%s\n%s' "$path" "$digest" "$ts" \
        | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key_hex" -binary | base64 | tr '+/' '-_' | tr -d '=\n')
  "${CURL[@]}" -X POST "$ORIGIN$path" -d "$body" \
    -H "Authorization: ql3w worker=$WORKER, session=$session, gen=$GEN, ts=$ts, sig=$sig"
}

pulled=$(signed /offers:pull "{\"schema\":\"qinglong/remote-offer@v1\",\"pullId\":\"$(cat /proc/sys/kernel/random/uuid)\"}")
[ "$(jq -r .status <<<"$pulled")" = offered ] || { echo "nothing offered: $pulled"; exit 1; }
offer=$(jq -r .offer.offerId <<<"$pulled")
fence=$(jq -c --argjson gen "$GEN" '{workerGeneration: $gen, projectId: .offer.projectId, runId: .offer.runId,
  attemptId: .offer.attemptId, leaseGeneration: .offer.leaseGeneration, leaseToken: .leaseToken}' <<<"$pulled")
echo "offered run $(jq -r .offer.runId <<<"$pulled") (attempt $(jq -r .offer.attemptNo <<<"$pulled"))"

activation=$(jq -c '. + {schema: "qinglong/remote-run-activation@v1"}' <<<"$fence")
echo "starting: $(signed "/offers/$offer/activation/starting" "$activation" | jq -c '{status, deadline: .snapshot.deadlineAtMs}')"
echo "running:  $(signed "/offers/$offer/activation/running" "$activation" | jq -c '{status, attempt: .snapshot.attemptStatus}')"

version=1
for _ in 1 2 3; do
  body=$(jq -c --arg offer "$offer" --argjson v "$version" \
    '. + {schema: "qinglong/remote-worker-lease-control@v1", offerId: $offer, expectedVersion: $v}' <<<"$fence")
  renewed=$(signed /lease-control "$body")
  version=$(jq -r .leaseVersion <<<"$renewed")
  echo "renewed:  $(jq -c '{status, leaseVersion, expiresAtMs}' <<<"$renewed")"
done

completion=$(jq -c --argjson v "$version" \
  '. + {schema: "qinglong/remote-run-completion@v1", leaseVersion: $v, exitCode: 0, errorCode: null, artifacts: []}' <<<"$fence")
echo "complete: $(signed "/offers/$offer/completion" "$completion" | jq -c '{status, runStatus, attemptStatus}')"
