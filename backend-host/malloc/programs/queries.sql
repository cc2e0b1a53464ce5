-- An in-memory database: create, insert @ROWS@ generated rows in one transaction, index,
-- query (group, range, self-join, aggregate), update, delete. Deterministic output. The
-- caller replaces @ROWS@ with the row count and feeds this to `sqlite3` on stdin.
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, val REAL, payload TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < @ROWS@)
INSERT INTO t
SELECT x, 'name' || (x * 7919 % 30011), x % 97, (x * 31337 % 1000) / 10.0,
       printf('%08x-%08x', (x * 2654435761) % 4294967296, (x * 40503) % 65536)
FROM c;
COMMIT;
CREATE INDEX t_name ON t(name);
CREATE INDEX t_grp_val ON t(grp, val);
SELECT grp, count(*), round(sum(val), 2), min(name), max(name) FROM t GROUP BY grp ORDER BY grp LIMIT 8;
SELECT count(*) FROM t WHERE name BETWEEN 'name1' AND 'name2';
SELECT a.id, b.id, a.name FROM t a JOIN t b ON a.name = b.name AND a.id < b.id ORDER BY a.id LIMIT 8;
SELECT name, count(*), group_concat(id, '+') FROM t GROUP BY name ORDER BY count(*) DESC, name LIMIT 5;
SELECT grp, val, count(*) FROM t WHERE grp BETWEEN 10 AND 12 AND val > 50 GROUP BY grp, val ORDER BY 3 DESC, 1, 2 LIMIT 5;
UPDATE t SET payload = payload || '/' || payload WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
CREATE TABLE s AS SELECT grp, group_concat(payload) AS all_payloads FROM t GROUP BY grp;
SELECT count(*), sum(length(payload)) FROM t;
SELECT sum(length(all_payloads)) FROM s;
