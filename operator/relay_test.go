package operator_test

import (
	"testing"
	"time"

	"github.com/openshell/openshell-operator/operator"
)

func TestValidateAuthorizationMaxAge(t *testing.T) {
	for d, ok := range map[time.Duration]bool{
		-time.Second: false, 0: false, time.Second: true, time.Minute: true,
		operator.MaxAuthorizationMaxAge: true, operator.MaxAuthorizationMaxAge + time.Second: false,
	} {
		if err := operator.ValidateAuthorizationMaxAge(d); (err == nil) != ok {
			t.Errorf("ValidateAuthorizationMaxAge(%s) = %v, want ok %t", d, err, ok)
		}
	}
}
