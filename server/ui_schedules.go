package server

import (
	"net/http"
	"net/url"

	"github.com/weirhq/weir/client"
)

// uiSchedulesPage is the list of a namespace's schedules.
type uiSchedulesPage struct {
	uiBase
	Schedules []*client.Schedule
}

func (s *Server) uiSchedules(w http.ResponseWriter, r *http.Request) {
	sess := s.requireSession(w, r)
	if sess == nil {
		return
	}
	namespace := r.PathValue("namespace")
	if err := s.forbidden(sess, namespace, RoleRead); err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	if !validName(namespace) {
		s.renderError(w, r, sess, "", invalidArgument("namespace", "invalid namespace %q: %s", namespace, nameRule))
		return
	}
	c, err := s.client(namespace)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	schedules, err := c.ListSchedules(r.Context())
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	s.render(w, r, http.StatusOK, "schedules", &uiSchedulesPage{uiBase: s.base(r, sess, namespace, "Schedules · "+namespace), Schedules: schedules})
}

// schedulesURL is the schedules page of namespace.
func schedulesURL(namespace string) string {
	return uiPrefix + "/namespaces/" + url.PathEscape(namespace) + "/schedules"
}
