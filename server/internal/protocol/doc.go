// Package protocol holds the server's protocol adapters: Envoy's rate
// limit service over gRPC (rls.go, override.go), the same as JSON over
// HTTP, POST /json (json.go, rlsjson.go, browser.go), forward auth
// for nginx, Traefik and Envoy's ext_authz (auth.go, path.go, host.go),
// and Envoy's Rate Limit Quota Service (rlqs.go, rlqsassign.go), with
// what only they share: the rate-limit headers of a response
// (headers.go) and the errors they answer (errors.go).
//
// A new protocol adapter goes here, beside them, in a file named for its
// protocol. Each adapter that decides requests does three things:
//
//  1. read its protocol's request into a decide.Request (decide.NewRequest,
//     a descriptor's entries and hits), refusing what the protocol allows
//     and sluice does not with a *decide.BadRequest (decide.Badf) that
//     names the field;
//  2. have it decided with Service.Decide, against Service.Current, one
//     snapshot from the start of the request to its answer;
//  3. write the decide.Outcome back in its protocol: Allowed, a Status per
//     descriptor, the RateLimit fields (headersOf, for the configured
//     style), and an error through WriteDecideError or grpcError.
//
// RLQS decides no request: it divides each limit among its streams with
// a lease.Authority (lease.Allocate), and sends each stream its share as
// a token bucket that Envoy decides on. It reads the config as the others
// do (Service.Current), one snapshot per renewal.
//
// The adapters hold no server: what they read of it comes through Service,
// which package server fills in (adapters.go there) with the config being
// served, the decision that counts its outcome in the metrics, the log and
// the settings of the protocols. How a request is decided is package
// decide's; listening, reloading, TLS, metrics and the settings
// themselves are package server's, which also registers the adapters'
// handlers (Adapters.RLS, ServeJSON, ServeAuth).
//
// The three protocols share one package because they share more than they
// differ: POST /json is RLS in JSON, and forward auth writes the same
// headers and errors. It is internal to the server module: its types are
// the contract between the server's parts, free to change with them; the
// public face stays package server's Server.ShouldRateLimit and Handler.
package protocol
