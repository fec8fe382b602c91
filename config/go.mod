module github.com/sluicehq/sluice/config

go 1.26.0

require (
	github.com/sluicehq/sluice v0.1.0
	go.yaml.in/yaml/v3 v3.0.6
)
