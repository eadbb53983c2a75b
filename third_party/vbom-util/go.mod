// Our stand-in for vbom.ml/util, which the Go module proxy refuses (403): see README.md.
// The path is the original's so that `replace vbom.ml/util => ./third_party/vbom-util`
// satisfies Kubernetes 1.15-1.19. `go 1.13`: the toolchains those versions are built with
// (Go 1.12-1.15) must accept it.
module vbom.ml/util

go 1.13
