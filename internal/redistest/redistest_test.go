package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func client(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNew(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var url, first string
	t.Run("set and get", func(t *testing.T) {
		url, first = redistest.New(t)
		c := client(t, url)
		if err := c.Set(ctx, first+"k", "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		got, err := c.Get(ctx, first+"k").Result()
		if err != nil || got != "v" {
			t.Fatalf("GET = %q, %v; want \"v\", nil", got, err)
		}
	})

	_, second := redistest.New(t)
	if first == "" || first == second {
		t.Errorf("two New calls gave prefixes %q and %q, want two different", first, second)
	}
	n, err := client(t, url).Exists(ctx, first+"k").Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	if n != 0 {
		t.Errorf("key %sk still exists after its test ended", first)
	}
}
