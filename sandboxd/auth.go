package sandboxd

import (
	"crypto/subtle"
	"net/http"

	"github.com/berth-dev/berth/errdefs"
)

// authenticate refuses, with 401 and before anything else, a request
// that does not carry the bearer token: a daemon reached over TCP,
// through a hosted service's port forward, serves anyone who finds its
// address otherwise. The token is compared in constant time, so that how
// long a refusal takes says nothing of how much of a guess was right.
func authenticate(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			if r.Body != nil {
				r.Body.Close()
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth-sandboxd"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"` + string(errdefs.ProviderAuth) + `","message":"sandboxd: missing or wrong bearer token"}` + "\n"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
