// Package decide is the server's decision core: a request in, an outcome
// out, whatever protocol brought the request and whoever reads the
// outcome. It matches each descriptor against the config once, applies
// replaces and limit overrides, takes the checks from the Limiter (all or
// nothing, or per descriptor in quota mode and under charge per
// descriptor), and says what each descriptor and the request come to: the
// statuses, the RateLimit fields, the limits that denied.
//
// What belongs here is how a request is decided. What does not: reading a
// protocol (the adapters, package server/internal/protocol), counting in
// the metrics and logging (package server reads the outcome for them),
// loading and reloading configs, and the admin console. The package is internal to the
// server module: its types are the contract between the server's parts,
// free to change with them, not an API of its own.
package decide
