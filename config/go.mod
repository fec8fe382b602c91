module github.com/sluicehq/sluice/config

go 1.26.0

replace github.com/sluicehq/sluice => ../

require (
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	go.yaml.in/yaml/v3 v3.0.6
)
