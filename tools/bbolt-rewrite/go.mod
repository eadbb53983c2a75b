// Built fully offline against the bbolt source Debian ships (golang-github-coreos-bbolt-dev,
// golang-golang-x-sys-dev): scripts/setup-bbolt-tool.sh rewrite. No proxy, no checksum database.
module kubelet-rehash/tools/bbolt-rewrite

go 1.19

require go.etcd.io/bbolt v1.3.6

require golang.org/x/sys v0.0.0-20200923182605-d9f96fdee20d // indirect

replace go.etcd.io/bbolt => /usr/share/gocode/src/go.etcd.io/bbolt

replace golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
