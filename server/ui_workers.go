package server

import (
	"net/http"
	"net/url"

	"github.com/weirhq/weir/client"
)

// uiWorkersPage is the list of a namespace's live workers.
type uiWorkersPage struct {
	uiBase
	Workers []*client.WorkerInfo
}

func (s *Server) uiWorkers(w http.ResponseWriter, r *http.Request) {
	uiNamespaceList(s, w, r, "workers", "Workers", (*client.Client).ListWorkers, func(base uiBase, workers []*client.WorkerInfo) any {
		return &uiWorkersPage{uiBase: base, Workers: workers}
	})
}

// workersURL is the workers page of namespace.
func workersURL(namespace string) string {
	return uiPrefix + "/namespaces/" + url.PathEscape(namespace) + "/workers"
}
