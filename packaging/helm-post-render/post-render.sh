#!/bin/sh
# Helm post-renderer for the apache/pulsar-helm-chart with metashift's sidecars
# (packaging/kubernetes-sidecar.yaml; docs/operator-guide.md, "Kubernetes"):
#
#   helm upgrade pulsar apache/pulsar -f your-values.yaml -f packaging/kubernetes-sidecar.yaml \
#       --post-renderer packaging/helm-post-render/post-render.sh
#
# It points the broker's, the bookies' and AutoRecovery's metadata URLs (their ConfigMaps) at the
# agent's ZooKeeper front on the pod's loopback, and keeps the chart's own bookie init container
# (pulsar-bookkeeper-verify-clusterid, which runs before any sidecar and reads the same ConfigMap)
# on the chart's direct URL: kustomization.yaml says how. Needs kubectl (kubectl kustomize).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/kustomization.yaml "$here"/urls-*.yaml "$work"/
cat > "$work/all.yaml"
exec kubectl kustomize "$work"
