// Package check holds the tests of deploy/: the Dockerfile linted as
// `docker build --check` lints it (BuildKit), the compose file loaded as
// `docker compose config` loads it (compose-go), the Kubernetes manifest
// decoded into the Kubernetes API's Go types, the systemd unit through
// `systemd-analyze verify`, and every flag these files give the node parsed
// by a built callsheet-node. It is a module of its own so the main module
// does not depend on BuildKit, compose-go or the Kubernetes API:
//
//	cd deploy/check && go test ./...    (scripts/check-deploy)
package check
