-- The app's own table. last_fence is the fence column a guarded write
-- compares with and raises (pgguard.AddFenceColumn adds one to an existing
-- table); pgfence's objects come from its migrations, listed first in
-- sqlc.yaml. main.go applies this file after pgfence's migrations.
CREATE TABLE invoices (
  id            text   PRIMARY KEY,
  customer      text   NOT NULL,
  billing_email text   NOT NULL DEFAULT '',
  status        text   NOT NULL DEFAULT 'PENDING',
  last_fence    bigint NOT NULL DEFAULT 0
);
