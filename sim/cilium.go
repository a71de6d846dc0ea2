package sim

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CiliumObjects are a Cilium agent DaemonSet (kube-system/cilium, with an
// init container, the agent pointed at the service address and one other
// setting, K8S_NODE_NAME=x) and operator Deployment
// (kube-system/cilium-operator, one replica), as a Cilium install has them:
// what a test creates for `stratum repoint --cilium` to point at the VIP. No
// kubelet runs in the simulator, so neither ever rolls out.
func CiliumObjects() (*appsv1.DaemonSet, *appsv1.Deployment) {
	labels := map[string]string{"k8s-app": "cilium"}
	pod := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "config", Image: "quay.io/cilium/cilium:v1.18.0"}},
			Containers: []corev1.Container{{Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.18.0",
				Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "10.96.0.1"}, {Name: "K8S_NODE_NAME", Value: "x"}}}},
		},
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium"},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: pod},
	}
	opLabels := map[string]string{"name": "cilium-operator"}
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-operator"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: opLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: opLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-operator", Image: "quay.io/cilium/operator-generic:v1.18.0"}}}}},
	}
	return ds, dep
}
