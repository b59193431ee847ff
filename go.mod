module github.com/compactor/compactor

go 1.26.8

require (
	github.com/google/uuid v1.6.0
	github.com/pkoukk/tiktoken-go v0.1.8
	github.com/pkoukk/tiktoken-go-loader v0.0.2
	pgregory.net/rapid v1.3.0
)

require github.com/dlclark/regexp2 v1.10.0 // indirect
