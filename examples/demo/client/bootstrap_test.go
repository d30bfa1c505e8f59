package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMakeBootstrap(t *testing.T) {
	b, err := makeBootstrap("127.0.0.1:15010", "demo-client.demo", "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	var want any
	if err := json.Unmarshal([]byte(`{
		"xds_servers": [{"server_uri": "127.0.0.1:15010", "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": "demo-client.demo", "metadata": {"MESH": "default", "NAMESPACE": "demo"}}
	}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bootstrap %s", b)
	}
}

func TestBootstrapEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(file, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	content, err := makeBootstrap("hub:1", "n1", "default", "demo")
	if err != nil {
		t.Fatal(err)
	}
	const xdsTarget = "xds:///echo.demo.svc.cluster.local:7070"

	for _, tc := range []struct {
		name    string
		opts    options
		env     map[string]string
		want    *envVar
		wantErr string
	}{
		{
			name: "bootstrap file, not yet in the environment",
			opts: options{target: xdsTarget, bootstrap: file},
			want: &envVar{bootstrapFileEnv, file},
		},
		{
			name: "bootstrap file, already in the environment",
			opts: options{target: xdsTarget, bootstrap: file},
			env:  map[string]string{bootstrapFileEnv: file},
		},
		{
			name:    "bootstrap file that does not exist",
			opts:    options{target: xdsTarget, bootstrap: file + ".missing"},
			wantErr: "--bootstrap",
		},
		{
			name: "hub and node id",
			opts: options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"},
			want: &envVar{bootstrapContentEnv, string(content)},
		},
		{
			name: "hub and node id, already in the environment",
			opts: options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"},
			env:  map[string]string{bootstrapContentEnv: string(content)},
		},
		{
			name: "hub and node id, but a bootstrap file set too would win",
			opts: options{target: xdsTarget, hub: "hub:1", nodeID: "n1", mesh: "default", namespace: "demo"},
			env:  map[string]string{bootstrapContentEnv: string(content), bootstrapFileEnv: file},
			want: &envVar{bootstrapContentEnv, string(content)},
		},
		{
			name:    "hub without node id",
			opts:    options{target: xdsTarget, hub: "hub:1"},
			wantErr: "together",
		},
		{
			name:    "xds target and no bootstrap anywhere",
			opts:    options{target: xdsTarget},
			wantErr: "needs an xDS bootstrap",
		},
		{
			name: "xds target and a bootstrap from the environment",
			opts: options{target: xdsTarget},
			env:  map[string]string{bootstrapFileEnv: file},
		},
		{
			name: "direct target needs none",
			opts: options{target: "127.0.0.1:17071"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bootstrapEnv(tc.opts, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
