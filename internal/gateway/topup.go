package gateway

import "net/http"

// topUp serves POST /v1/credits/topup.
func (s *Server) topUp(http.ResponseWriter, *http.Request) error { return notYet() }

// balance serves GET /v1/credits/balance.
func (s *Server) balance(http.ResponseWriter, *http.Request) error { return notYet() }
