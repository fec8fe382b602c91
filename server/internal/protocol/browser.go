package protocol

import (
	"net/http"

	"github.com/sluicehq/sluice/server/internal/hosts"
)

// A browser can be made to send requests to the service by any page its
// user opens: a script's fetch in no-cors mode, a form, a multipart
// upload, all without a CORS preflight. Such a request would spend a
// client's quota, and with DNS rebinding (the page's name pointed at the
// service's address) the page could read the answers too. The service's
// clients (Envoy, proxies, curl, programs) send no Origin and no
// Sec-Fetch-* headers; a browser sends Origin on every POST and, when the
// request crosses sites, Sec-Fetch-Site.

// fromBrowserPage reports whether r was sent by a web page: it carries
// Origin, or a Sec-Fetch-Site that names another site.
func fromBrowserPage(r *http.Request) bool {
	if len(r.Header["Origin"]) > 0 {
		return true
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	return false
}

// refuseBrowser answers a POST /json that a web page sent with 403, and
// one whose Host the server does not answer to (Service.JSONHosts)
// with 421, before anything is read or charged. It reports whether it
// answered.
func (a *Adapters) refuseBrowser(w http.ResponseWriter, r *http.Request) bool {
	if a.jsonHosts != nil && !hosts.Allowed(r.Host, a.jsonHosts) {
		httpError(w, http.StatusMisdirectedRequest, "host not allowed: POST /json answers to IP addresses, localhost and the names of --http-allowed-hosts")
		return true
	}
	if fromBrowserPage(r) {
		httpError(w, http.StatusForbidden, "POST /json does not answer web pages: the request carries Origin or a cross-site Sec-Fetch-Site")
		return true
	}
	return false
}
