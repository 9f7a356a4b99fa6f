module github.com/stargate-router/stargate/tools/obs

go 1.26.0

require (
	github.com/grafana/grafana-foundation-sdk/go v0.0.22
	go.yaml.in/yaml/v3 v3.0.5
)
