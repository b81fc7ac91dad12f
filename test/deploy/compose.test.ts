// deploy/compose.yaml and deploy/prometheus.yml hang together: schema-valid (docker compose config when a
// compose CLI is installed), every service health-checked, dependencies, volumes, mounts and secrets resolved,
// Prometheus scraping every instance's admin port with the rules mounted where it loads them.
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { networkInterfaces, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config/load.ts'
import { startAdminServer } from '../../src/observability/admin.ts'
import { createLogger } from '../../src/observability/logger.ts'

// js-yaml is in the lockfile (a dev-dependency of our dev tools); it has no bundled types.
const yaml = createRequire(import.meta.url)('js-yaml') as { load(text: string): unknown }

const ROOT = join(import.meta.dirname, '../..')
const DEPLOY = join(ROOT, 'deploy')

interface Service {
  image?: string
  build?: { context: string; dockerfile?: string }
  environment?: Record<string, string>
  volumes?: string[]
  secrets?: string[]
  ports?: string[]
  depends_on?: Record<string, { condition: string }>
  healthcheck?: { test: string[] | string }
  command?: string[]
  entrypoint?: string[]
}
interface Compose {
  services: Record<string, Service>
  volumes?: Record<string, unknown>
  secrets?: Record<string, { file: string }>
}

const compose = yaml.load(readFileSync(join(DEPLOY, 'compose.yaml'), 'utf8')) as Compose
const services = compose.services
const tollgates = Object.keys(services).filter((n) => /^tollgate-\d+$/.test(n))

/** A multi-host postgres:// URL's hosts and target_session_attrs (WHATWG URL refuses a host list). */
function databaseHosts(url: string): { hosts: string[]; targetSessionAttrs: string | null } {
  const m = /^postgres(?:ql)?:\/\/(?:[^@/]*@)?([^/?]+)(?:\/[^?]*)?(?:\?(.*))?$/.exec(interpolate(url))!
  return {
    hosts: m[1]!.split(','),
    targetSessionAttrs: new URLSearchParams(m[2] ?? '').get('target_session_attrs'),
  }
}

/** `${NAME:-default}` → default, as compose interpolates it with NAME unset. */
const interpolate = (s: string) => s.replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1')

function composeCli(): string[] | null {
  for (const cmd of [['docker', 'compose'], ['docker-compose']]) {
    try {
      execFileSync(cmd[0]!, [...cmd.slice(1), 'version'], { stdio: 'ignore', timeout: 10_000 })
      return cmd
    } catch {}
  }
  return null
}
const cli = composeCli()
if (!cli) {
  console.warn(
    '[test/deploy/compose] schema check skipped: neither `docker compose` nor `docker-compose` is installed (apt-get install docker-compose, or Docker Desktop); the structural checks still run.',
  )
}

describe('deploy/compose.yaml', () => {
  it.skipIf(!cli)('is valid for the compose CLI (`config -q` checks it against the compose schema)', () => {
    const r = spawnSync(cli![0]!, [...cli!.slice(1), '-f', join(DEPLOY, 'compose.yaml'), 'config', '-q'], {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, TREASURY_KEY_FILE: '/dev/null' },
    })
    expect(r.status, r.stderr).toBe(0)
  })

  it('runs two tollgate instances on one PostgreSQL primary and its standby, with Prometheus and Grafana', () => {
    expect(tollgates).toEqual(['tollgate-1', 'tollgate-2'])
    expect(Object.keys(services)).toEqual(
      expect.arrayContaining(['postgres', 'postgres-standby', 'prometheus', 'grafana']),
    )
    for (const name of tollgates) {
      const s = services[name]!
      expect(resolve(DEPLOY, s.build!.context, s.build!.dockerfile ?? 'Dockerfile')).toBe(
        join(ROOT, 'Dockerfile'),
      )
      const db = databaseHosts(s.environment!.DATABASE_URL!)
      expect(db.hosts).toEqual(['postgres:5432', 'postgres-standby:5432'])
      expect(db.targetSessionAttrs).toBe('read-write')
      expect(s.environment!.NODE_ENV).toBe('production')
    }
    // Both on the same database.
    const urls = new Set(tollgates.map((n) => services[n]!.environment!.DATABASE_URL))
    expect(urls.size).toBe(1)
  })

  it('builds the standby from the primary, replicating synchronously, and never copies a sync setting', () => {
    const primary = services.postgres!
    const standby = services['postgres-standby']!
    expect(standby.image).toBe(primary.image)
    expect(standby.depends_on!.postgres!.condition).toBe('service_healthy')
    const init = (primary.volumes ?? []).find((v) => v.includes('/docker-entrypoint-initdb.d/'))!
    const initScript = readFileSync(resolve(DEPLOY, init.split(':')[0]!), 'utf8')
    expect(initScript).toMatch(/CREATE ROLE replicator WITH REPLICATION/)
    expect(initScript).toMatch(/ALTER SYSTEM SET synchronous_standby_names = :'names'/)
    expect(initScript).toMatch(/host replication replicator all scram-sha-256/)
    // The default names the standby's application_name: synchronous unless SYNCHRONOUS_STANDBY_NAMES=''.
    expect(primary.environment!.SYNCHRONOUS_STANDBY_NAMES).toMatch(
      /^\$\{SYNCHRONOUS_STANDBY_NAMES-standby1\}$/,
    )
    const entry = (standby.volumes ?? []).find((v) => v.includes('standby.sh'))!
    expect(standby.entrypoint).toEqual(['/bin/bash', entry.split(':')[1]])
    const standbyScript = readFileSync(resolve(DEPLOY, entry.split(':')[0]!), 'utf8')
    expect(standbyScript).toMatch(/pg_basebackup -h postgres .*-R -X stream -C -S standby1/)
    expect(standbyScript).toMatch(/application_name=standby1/)
    // Promoted and alone, a server with the primary's sync setting would wait forever on every commit.
    expect(standbyScript).toContain(`echo "synchronous_standby_names = ''" >> "$PGDATA/postgresql.auto.conf"`)
    for (const name of tollgates)
      expect(services[name]!.depends_on!['postgres-standby']!.condition).toBe('service_healthy')
  })

  it('health-checks every service, and dependencies wait on a declared service in a valid condition', () => {
    for (const [name, s] of Object.entries(services)) {
      expect(s.healthcheck?.test, `${name} healthcheck`).toBeTruthy()
      for (const [dep, { condition }] of Object.entries(s.depends_on ?? {})) {
        expect(Object.keys(services), `${name} depends on ${dep}`).toContain(dep)
        expect(['service_started', 'service_healthy', 'service_completed_successfully']).toContain(condition)
      }
    }
    for (const name of tollgates) {
      expect(services[name]!.depends_on!.postgres!.condition).toBe('service_healthy')
      expect(JSON.stringify(services[name]!.healthcheck!.test)).toContain('/readyz')
    }
    expect(services.grafana!.depends_on!.prometheus!.condition).toBe('service_healthy')
  })

  it('resolves every volume, bind mount and secret', () => {
    const declared = Object.keys(compose.volumes ?? {})
    for (const [name, s] of Object.entries(services)) {
      for (const v of s.volumes ?? []) {
        const [source] = v.split(':')
        if (source!.startsWith('.') || source!.startsWith('/')) {
          expect(existsSync(resolve(DEPLOY, source!)), `${name}: bind mount ${source}`).toBe(true)
        } else {
          expect(declared, `${name}: named volume ${source}`).toContain(source)
        }
      }
      for (const secret of s.secrets ?? []) expect(Object.keys(compose.secrets ?? {})).toContain(secret)
    }
    for (const name of tollgates) {
      const env = services[name]!.environment!
      // The key only as a Docker secret, never in the environment.
      expect(env.TREASURY_PRIVATE_KEY).toBeUndefined()
      const secret = env.TREASURY_PRIVATE_KEY_FILE!.replace('/run/secrets/', '')
      expect(services[name]!.secrets).toContain(secret)
    }
  })

  it('points Grafana at Prometheus on the compose network and mounts what its provisioning loads', () => {
    const grafana = services.grafana!
    const promUrl = new URL(interpolate(grafana.environment!.PROMETHEUS_URL!))
    expect(promUrl.hostname).toBe('prometheus')
    expect(services.prometheus!.ports).toContain(`${promUrl.port}:${promUrl.port}`)
    const datasource = readFileSync(join(ROOT, 'grafana/provisioning/datasources/prometheus.yaml'), 'utf8')
    expect(datasource).toMatch(/url: \$\{PROMETHEUS_URL\}/)
    const provider = yaml.load(
      readFileSync(join(ROOT, 'grafana/provisioning/dashboards/tollgate.yaml'), 'utf8'),
    ) as {
      providers: Array<{ options: { path: string } }>
    }
    const mounts = (grafana.volumes ?? []).map((v) => v.split(':'))
    expect(mounts).toContainEqual(['../grafana/dashboards', provider.providers[0]!.options.path, 'ro'])
    expect(mounts).toContainEqual(['../grafana/provisioning', '/etc/grafana/provisioning', 'ro'])
  })
})

describe('deploy/prometheus.yml', () => {
  const prom = yaml.load(readFileSync(join(DEPLOY, 'prometheus.yml'), 'utf8')) as {
    rule_files: string[]
    scrape_configs: Array<{ job_name: string; static_configs: Array<{ targets: string[] }> }>
  }

  it('scrapes every tollgate instance on its admin port as job "tollgate" (the alert rules select it)', () => {
    const job = prom.scrape_configs.find((j) => j.job_name === 'tollgate')!
    const targets = job.static_configs.flatMap((c) => c.targets)
    expect(targets.sort()).toEqual(
      tollgates.map((n) => `${n}:${interpolate(services[n]!.environment!.ADMIN_PORT!)}`).sort(),
    )
    expect(readFileSync(join(DEPLOY, 'alerts.yml'), 'utf8')).toContain('up{job="tollgate"}')
  })

  it('lets Prometheus reach each admin port on the compose network, and publishes none to the host', async () => {
    for (const name of tollgates) {
      const env = Object.fromEntries(
        Object.entries(services[name]!.environment!).map(([k, v]) => [k, interpolate(String(v))]),
      )
      // The instance's own configuration, as the image loads it (the key comes from a secret file there).
      delete env.TREASURY_PRIVATE_KEY_FILE
      const config = loadConfig({ env: { ...env, TREASURY_PRIVATE_KEY: `0x${'1'.repeat(64)}` } })
      expect(config.admin.host).toBe('0.0.0.0')
      expect(String(config.server.admin_port)).toBe(env.ADMIN_PORT)
      const published = (services[name]!.ports ?? []).map((p) => String(p).split(':').at(-1))
      expect(published).not.toContain(env.ADMIN_PORT)
    }
    // Bound so, the admin server answers on an address other than loopback (the container's compose-network
    // address in Docker): here, this machine's first non-internal IPv4 address when it has one.
    const external = Object.values(networkInterfaces())
      .flat()
      .find((i) => i && i.family === 'IPv4' && !i.internal)
    if (!external) return
    const admin = await startAdminServer({
      host: '0.0.0.0',
      port: 0,
      checks: [],
      logger: createLogger('silent'),
      token: null,
      routeLimiter: null,
      routes: {},
    })
    try {
      const r = await fetch(`http://${external.address}:${admin.port}/healthz`)
      expect(r.status).toBe(200)
    } finally {
      await admin.close()
    }
  })

  it('loads the alert rules from where compose mounts them', () => {
    const mounts = (services.prometheus!.volumes ?? []).map((v) => v.split(':'))
    expect(mounts).toContainEqual(['./alerts.yml', prom.rule_files[0], 'ro'])
    expect(mounts).toContainEqual(['./prometheus.yml', '/etc/prometheus/prometheus.yml', 'ro'])
  })

  let promtool = false
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' })
    promtool = true
  } catch {}
  it.skipIf(!promtool)('passes `promtool check config` (rules path pointed at the repository copy)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-promcfg-'))
    try {
      const text = readFileSync(join(DEPLOY, 'prometheus.yml'), 'utf8').replace(
        prom.rule_files[0]!,
        join(DEPLOY, 'alerts.yml'),
      )
      writeFileSync(join(dir, 'prometheus.yml'), text)
      const r = spawnSync('promtool', ['check', 'config', join(dir, 'prometheus.yml')], {
        encoding: 'utf8',
        timeout: 30_000,
      })
      expect(r.status, r.stdout + r.stderr).toBe(0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
