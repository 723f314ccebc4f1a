package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Admin calls the operator's routes of a node serving the API (Serve),
// behind the server's admin key, as `tandem cluster` does.
type Admin struct {
	// URL is any node's, e.g. http://10.0.0.1:7711.
	URL string
	// Key is an admin API key; empty sends none.
	Key string
	// Client defaults to http.DefaultClient.
	Client *http.Client
}

// Status is GET /_cluster/status: the node's view of the cluster.
func (a Admin) Status(ctx context.Context) (Status, error) {
	var st Status
	err := a.call(ctx, http.MethodGet, "/_cluster/status", &st)
	return st, err
}

// Drain is POST /_cluster/nodes/{node}/drain (Node.Drain): it returns once
// the drain is recorded; Status shows the moves that follow.
func (a Admin) Drain(ctx context.Context, node string) error {
	return a.call(ctx, http.MethodPost, "/_cluster/nodes/"+node+"/drain", nil)
}

// Backup is GET /_cluster/backup (Node.Backup): it writes the node's
// backup to w.
func (a Admin) Backup(ctx context.Context, w io.Writer) error {
	return a.call(ctx, http.MethodGet, "/_cluster/backup", w)
}

// call sends a request and decodes its JSON answer into out, or copies
// it into out when out is an io.Writer.
func (a Admin) call(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(a.URL, "/")+path, nil)
	if err != nil {
		return err
	}
	if a.Key != "" {
		req.Header.Set("Authorization", "Bearer "+a.Key)
	}
	client := a.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("cluster: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if w, ok := out.(io.Writer); ok && resp.StatusCode/100 == 2 {
		if _, err := io.Copy(w, resp.Body); err != nil {
			return fmt.Errorf("cluster: %s %s: %w", method, path, err)
		}
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("cluster: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("cluster: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}
