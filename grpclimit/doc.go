// Package grpclimit limits the calls of a gRPC server with a
// sluice.Limiter: unary and stream server interceptors that answer
// codes.ResourceExhausted with a google.rpc.RetryInfo detail (httplimit's
// Retry-After) and a google.rpc.QuotaFailure naming the rules that denied
// the call (the violated-policies of httplimit's problem body).
//
// An Interceptor holds rules, each a sluice.Rule with a KeyFunc that says
// what it counts by and, optionally, the methods it covers:
//
//   - PeerIP: the caller's address, IPv6 grouped by /64. The default choice
//     for a public server.
//   - APIKey: a secret, such as an API key or a bearer token, counted by
//     its digest so that no secret reaches the store. A call without one
//     fails with codes.InvalidArgument naming the rule and the metadata,
//     as a call without any key a rule needs does: wrap it in Optional and
//     pair it with a PeerIP rule, or use First(APIKey("x-api-key"),
//     PeerIP()).
//   - Metadata: a value that is not a secret, such as a tenant.
//   - Method and Const: the method, or one key for all calls.
//   - Join combines keys ("per method per IP"); First picks the first that
//     applies, each part counting apart from the others.
//
// A call passes only if every rule covering it allows it (all-or-nothing,
// as sluice.Limiter decides). When the store fails, each rule's
// sluice.Failure decides; shadow rules, or WithShadow for all, decide and
// report through an Observer but never deny. WithHeaders adds the IETF
// RateLimit fields to the response header metadata.
//
// A stream counts once, when it starts. To limit the messages of a
// long-lived stream, pace them in the handler with a sluice.LeakyQueue.
package grpclimit
