// Command webhook-probe is a validating admission webhook that refuses every request it is sent and names the pod
// that refused it and the user who asked: the node tier's proof that the API server reaches a pod on a real node
// through the pod's Service (tests/node/test_in_cluster_api.py; docs/rehearsal.md "Real nodes").
// Standard library only, built with CGO_ENABLED=0 into a one-file image. Ref: the AdmissionReview of
// k8s.io/api/admission/v1 (request.uid, request.userInfo.username; response.uid, allowed, status).
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
)

type admissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *admissionRequest  `json:"request,omitempty"`
	Response   *admissionResponse `json:"response,omitempty"`
}

type admissionRequest struct {
	UID      string `json:"uid"`
	UserInfo struct {
		Username string `json:"username"`
	} `json:"userInfo"`
}

type status struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type admissionResponse struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
	Status  status `json:"status"`
}

func main() {
	pod, _ := os.Hostname()
	http.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "expected an AdmissionReview", http.StatusBadRequest)
			return
		}
		user := review.Request.UserInfo.Username
		log.Printf("refusing request %s of %s", review.Request.UID, user)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(admissionReview{
			APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
			Response: &admissionResponse{UID: review.Request.UID, Allowed: false, Status: status{
				Code: http.StatusForbidden, Message: fmt.Sprintf("refused by pod %s for %s", pod, user)}},
		})
	})
	log.Fatal(http.ListenAndServeTLS(":8443", "/tls/tls.crt", "/tls/tls.key", nil))
}
