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
	sess := s.requireSession(w, r)
	if sess == nil {
		return
	}
	namespace := r.PathValue("namespace")
	if err := s.uiNamespace(sess, namespace, RoleRead); err != nil {
		s.renderError(w, r, sess, "", err)
		return
	}
	c, err := s.client(namespace)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	workers, err := c.ListWorkers(r.Context())
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	s.render(w, r, http.StatusOK, "workers", &uiWorkersPage{uiBase: s.base(r, sess, namespace, "Workers · "+namespace), Workers: workers})
}

// workersURL is the workers page of namespace.
func workersURL(namespace string) string {
	return uiPrefix + "/namespaces/" + url.PathEscape(namespace) + "/workers"
}
