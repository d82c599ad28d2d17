package gatewayapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"

	"github.com/openshell/openshell-operator/internal/gatewayapi/pb/openshellv1"
	v01 "github.com/openshell/openshell-operator/internal/gatewayapi/pb/v01/openshellv1"
)

// The 0.0.x messages are compiled under the proto package
// openshell.legacy.v1 (proto/legacy) so that they can live beside the 0.1
// line's, which keep the release's names; on the wire both lines serve
// the service as openshell.v1.OpenShell, the 0.1 protos' own name.
var (
	legacyService = "/" + openshellv1.OpenShell_ServiceDesc.ServiceName + "/"
	wireService   = "/" + v01.OpenShell_ServiceDesc.ServiceName + "/"
)

// LegacyMethod is the method path a 0.0.x gateway serves for a generated
// legacy method name ("/openshell.legacy.v1.OpenShell/X" →
// "/openshell.v1.OpenShell/X"); other paths are returned unchanged.
func LegacyMethod(method string) string {
	if rest, ok := strings.CutPrefix(method, legacyService); ok {
		return wireService + rest
	}
	return method
}

// LegacyServiceDesc is the legacy service description under the service's
// wire name, for a server playing a 0.0.x gateway.
func LegacyServiceDesc() *grpc.ServiceDesc {
	d := openshellv1.OpenShell_ServiceDesc
	d.ServiceName = strings.Trim(wireService, "/")
	return &d
}

// legacyConn sends the generated legacy client's calls under the wire
// name of the service.
type legacyConn struct{ grpc.ClientConnInterface }

func (c legacyConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(ctx, LegacyMethod(method), args, reply, opts...)
}

func (c legacyConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(ctx, desc, LegacyMethod(method), opts...)
}
