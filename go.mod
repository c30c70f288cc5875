module github.com/goddp/ddp

go 1.26

require (
	github.com/prometheus/client_golang v1.23.2 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
)
