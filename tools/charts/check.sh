#!/usr/bin/env bash
# tools/charts/check.sh: the body of make charts-check (the Makefile builds
# the tools and the binaries first and passes their paths):
#
#   HELM=bin/helm-vX HELM_UNITTEST=bin/helm-unittest-vY CHARTCHECK=bin/chartcheck BIN=bin tools/charts/check.sh
#
# 1. every chart under charts/: helm lint --strict (defaults, then each
#    ci/*-values.yaml), helm template of the same, each render decoded
#    strictly against k8s.io/api (kinds of other API groups, such as the
#    Prometheus Operator's, are skipped by apiVersion and listed), and the
#    chart's helm-unittest suites;
# 2. every binary's settings reachable from its chart (chartcheck env);
# 3. the dev stack rendered phase by phase and as a whole (scripts/dev-stack --dry-run);
# 4. docs/deploy.md's values tables generated from the charts' values.yaml;
# 5. the tools' own tests and go.mod tidiness.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
: "${HELM:?}" "${HELM_UNITTEST:?}" "${CHARTCHECK:?}" "${BIN:?}"
started=$SECONDS
skip=(-skip-group monitoring.coreos.com)

for chart in charts/*/; do
	chart=${chart%/}
	name=$(basename "$chart")
	values=("")
	for v in "$chart"/ci/*-values.yaml; do
		[ -e "$v" ] && values+=("$v")
	done
	for v in "${values[@]}"; do
		args=()
		label="$name (defaults)"
		if [ -n "$v" ]; then
			args=(-f "$v")
			label="$name ($(basename "$v"))"
		fi
		"$HELM" lint --strict --quiet "$chart" "${args[@]}" >/dev/null || {
			"$HELM" lint --strict "$chart" "${args[@]}"
			echo "charts-check: helm lint --strict $label failed" >&2
			exit 1
		}
		"$HELM" template "$name" "$chart" --namespace charts-check "${args[@]}" |
			"$CHARTCHECK" strict "${skip[@]}" -label "$label" | grep -v '^  note:'
	done
	if [ -d "$chart/tests" ]; then
		out=$("$HELM_UNITTEST" "$chart" 2>&1) || { echo "$out"; echo "charts-check: helm-unittest $name failed" >&2; exit 1; }
		echo "unittest $name: $(echo "$out" | grep '^Tests:' | tr -s ' ')"
	fi
done

"$CHARTCHECK" env -helm "$HELM" -chart charts/gateway -binary "$BIN/gateway" -container gateway -values charts/gateway/ci/all-features-values.yaml
"$CHARTCHECK" env -helm "$HELM" -chart charts/hub -binary "$BIN/hub" -container hub -values charts/hub/ci/all-features-values.yaml
"$CHARTCHECK" env -helm "$HELM" -chart charts/pylon -binary "$BIN/pylon" -container pylon -values charts/pylon/ci/all-features-values.yaml
"$CHARTCHECK" env -helm "$HELM" -chart charts/mock-engine -binary "$BIN/mock-engine" -container mock-engine -values charts/mock-engine/ci/all-features-values.yaml

HELM=$HELM CHARTCHECK=$CHARTCHECK scripts/dev-stack --dry-run

"$CHARTCHECK" values-doc -doc docs/deploy.md charts/gateway charts/hub charts/pylon charts/mock-engine charts/dev-stack

# -trimpath as the builds of the tools, so the test build reuses their packages.
(cd tools/charts && GOWORK=off go test -trimpath -count=1 ./... >/dev/null && GOWORK=off go mod tidy -diff >/dev/null) || {
	echo "charts-check: the tests of tools/charts failed or its go.mod is not tidy (cd tools/charts && GOWORK=off go test ./... && go mod tidy -diff)" >&2
	exit 1
}
echo "tools/charts: go test passed, go.mod tidy"
echo "charts-check: passed in $((SECONDS - started)) s"
