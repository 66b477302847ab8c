-- Tenants' configuration files of envoyproxy/ratelimit (issue 39), one per
-- domain, kept as uploaded; every instance parses them into its
-- envoyconf.Catalog. What a tenant holds is bounded in the transaction
-- that writes (pgstore/envoy.go, under the tenant row's lock): at most 100
-- domains and 1,000 rules over all of them. The checks below repeat the
-- bounds of one row, in case anything but pgstore writes here.
--
-- version names a row's content: a new value from envoy_domains_version at
-- every write, never reused (a domain deleted and put again gets a new
-- one), so that an instance reloading a tenant's files fetches and parses
-- again only those whose version it does not hold.
CREATE SEQUENCE envoy_domains_version;
CREATE TABLE envoy_domains (
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    domain     text NOT NULL CHECK (octet_length(domain) BETWEEN 1 AND 255),
    source     text NOT NULL CHECK (octet_length(source) <= 65536),
    -- The file's rate_limit blocks, unlimited ones included.
    rules      integer NOT NULL CHECK (rules BETWEEN 0 AND 1000),
    version    bigint NOT NULL DEFAULT nextval('envoy_domains_version'),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, domain)
);
ALTER SEQUENCE envoy_domains_version OWNED BY envoy_domains.version;

-- A change sends envoy:<tenant id> on tollgate_changes (migration 000004),
-- a kind of its own: the instances' policy Catalogs are not touched by a
-- domain's change, nor their envoyconf.Catalogs by a policy's.
CREATE TRIGGER envoy_domains_notify_change
AFTER INSERT OR UPDATE OR DELETE ON envoy_domains
FOR EACH ROW EXECUTE FUNCTION tollgate_notify_change('envoy', 'tenant_id');
