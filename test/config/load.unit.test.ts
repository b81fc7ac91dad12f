import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../../src/config/load.ts'

describe('loadConfig', () => {
  it('has every documented default', () => {
    const c = loadConfig({ env: {} })
    expect(c.server.threads).toBe(1)
    expect(c.fees.owner_share_bps).toBe(9500)
    expect(c.chain.confirmations).toBe(1)
    expect(c.chain.max_proof_age_ms).toBe(86_400_000)
    expect(c.verify.wait_ms).toBe(10_000)
    expect(c.proxy.retry_window_ms).toBe(600_000)
    expect(c.proxy.upstream_timeout_ms).toBe(30_000)
    expect(c.proxy.quote_ttl_ms).toBe(300_000)
    expect(c.proxy.allow_private_upstreams).toBe(false)
    expect(c.payouts.interval_ms).toBe(60_000)
    expect(c.payouts.threshold).toBe(100)
    expect(c.payouts.min_amount).toBe(0.01)
    expect(c.webhooks.retry_schedule_ms).toEqual([
      5000, 300000, 1800000, 7200000, 18000000, 36000000, 36000000,
    ])
    expect(Object.isFrozen(c.server)).toBe(true)
  })

  it('lets NODE_ENV files and environment variables override', () => {
    const c = loadConfig({
      env: { NODE_ENV: 'test', PORT: '9999', ALLOW_PRIVATE_UPSTREAMS: 'false', LOG_LEVEL: 'error' },
    })
    expect(c.server.port).toBe(9999)
    expect(c.server.admin_port).toBe(0)
    expect(c.proxy.allow_private_upstreams).toBe(false)
    expect(c.log.level).toBe('error')
  })

  it('trusts no proxy by default and refuses a trusted_proxies entry that is not an address or CIDR', () => {
    const c = loadConfig({ env: {} })
    expect(c.server.trusted_proxies).toEqual([])
    expect(c.verify.not_found_ttl_ms).toBe(60_000)
    expect(c.rate_limits.chain_lookups_per_client).toBe(8)
    const ok = loadConfig({
      env: {},
      overrides: { server: { trusted_proxies: ['10.0.0.0/8', '::1', 'fd00::/8'] } },
    })
    expect(ok.server.trusted_proxies).toEqual(['10.0.0.0/8', '::1', 'fd00::/8'])
    const fromEnv = loadConfig({ env: { TRUSTED_PROXIES: ' 10.0.0.0/8, fd00::/8 ,' } })
    expect(fromEnv.server.trusted_proxies).toEqual(['10.0.0.0/8', 'fd00::/8'])
    for (const bad of ['10.0.0.0/33', 'lb.internal', '10.0.0.0/8/1', 'fd00::/129'])
      expect(() => loadConfig({ env: {}, overrides: { server: { trusted_proxies: [bad] } } }), bad).toThrow(
        /server\.trusted_proxies\.0/,
      )
  })

  it('refuses a claim deadline that a statement timeout could cut short after the commit', () => {
    // A COMMIT cancelled while it waits for a synchronous standby is reported as a success on the primary.
    const overrides = (claimMs: number, statementMs: number) => ({
      claims: { timeout_ms: claimMs },
      database: { statement_timeout_ms: statementMs },
    })
    expect(() => loadConfig({ env: {}, overrides: overrides(10_000, 10_000) })).toThrow(/claims\.timeout_ms/)
    expect(() => loadConfig({ env: {}, overrides: overrides(0, 10_000) })).toThrow(/claims\.timeout_ms/)
    expect(loadConfig({ env: {}, overrides: overrides(3_000, 10_000) }).claims.timeout_ms).toBe(3_000)
    expect(loadConfig({ env: {}, overrides: overrides(0, 0) }).claims.timeout_ms).toBe(0)
  })

  it('names the bad setting', () => {
    expect(() => loadConfig({ env: { PORT: 'eighty' } })).toThrow(/server\.port/)
    expect(() => loadConfig({ env: { NETWORK: 'mainnet' } })).toThrow(/chain\.network/)
    expect(() => loadConfig({ env: { DATABASE_URL: 'mysql://x' } })).toThrow(/database\.url/)
    expect(() => loadConfig({ env: {}, overrides: { fees: { owner_share_bps: 12000 } } })).toThrow(
      /fees\.owner_share_bps/,
    )
    expect(() => loadConfig({ env: { NETWORK: 'base' } })).toThrow(ConfigError)
    expect(() => loadConfig({ env: { THREADS: '4' } })).toThrow(/server\.threads/)
  })

  it('keeps the treasury key out of serialised config and refuses a malformed one without echoing it', () => {
    const key = `0x${'ab'.repeat(32)}`
    const c = loadConfig({ env: { TREASURY_PRIVATE_KEY: key } })
    expect(c.secrets.treasury_private_key).toBe(key)
    expect(JSON.stringify(c)).not.toContain(key)
    try {
      loadConfig({ env: { TREASURY_PRIVATE_KEY: '0xnotakey-secret' } })
      expect.unreachable()
    } catch (err) {
      expect((err as Error).message).toMatch(/TREASURY_PRIVATE_KEY/)
      expect((err as Error).message).not.toContain('notakey-secret')
    }
  })
})

describe('treasury key from a file (TREASURY_PRIVATE_KEY_FILE, the Docker secrets convention)', () => {
  const key = `0x${'cd'.repeat(32)}`
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-key-'))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))
  const write = (name: string, text: string) => {
    const file = join(dir, name)
    writeFileSync(file, text, { mode: 0o600 })
    return file
  }

  it('reads the key from the file, trailing newline and all, and keeps it out of serialised config', () => {
    const file = write('key', `${key}\n`)
    const c = loadConfig({
      env: { NETWORK: 'base', RPC_URL: 'https://rpc.example', TREASURY_PRIVATE_KEY_FILE: file },
    })
    expect(c.secrets.treasury_private_key).toBe(key)
    expect(JSON.stringify(c)).not.toContain(key)
  })

  it('refuses both the variable and the file, naming both', () => {
    const file = write('both', key)
    expect(() => loadConfig({ env: { TREASURY_PRIVATE_KEY: key, TREASURY_PRIVATE_KEY_FILE: file } })).toThrow(
      /TREASURY_PRIVATE_KEY, TREASURY_PRIVATE_KEY_FILE: set one of them, not both/,
    )
  })

  it('names the setting and the path when the file cannot be read', () => {
    const missing = join(dir, 'nope')
    const err = catchConfigError(() => loadConfig({ env: { TREASURY_PRIVATE_KEY_FILE: missing } }))
    expect(err.message).toContain('TREASURY_PRIVATE_KEY_FILE')
    expect(err.message).toContain(missing)
    expect(err.message).toContain('ENOENT')
    // A directory is not a key file either.
    expect(catchConfigError(() => loadConfig({ env: { TREASURY_PRIVATE_KEY_FILE: dir } })).message).toMatch(
      /TREASURY_PRIVATE_KEY_FILE: cannot read .* \(EISDIR\)/,
    )
  })

  it('refuses an empty file and a malformed key without echoing the content', () => {
    expect(() => loadConfig({ env: { TREASURY_PRIVATE_KEY_FILE: write('empty', '\n') } })).toThrow(
      /TREASURY_PRIVATE_KEY_FILE: .* is empty/,
    )
    const err = catchConfigError(() =>
      loadConfig({ env: { TREASURY_PRIVATE_KEY_FILE: write('bad', '0xnot-a-key-secret\n') } }),
    )
    expect(err.message).toMatch(/TREASURY_PRIVATE_KEY_FILE \(.*bad\): must be 0x followed by 64 hex digits/)
    expect(err.message).not.toContain('not-a-key-secret')
  })

  it('says a key is required on a real network, naming both ways to give it', () => {
    expect(() => loadConfig({ env: { NETWORK: 'base', RPC_URL: 'https://rpc.example' } })).toThrow(
      /TREASURY_PRIVATE_KEY: required on network base \(or TREASURY_PRIVATE_KEY_FILE/,
    )
  })
})

function catchConfigError(fn: () => unknown): ConfigError {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError)
    return err as ConfigError
  }
  throw new Error('expected a ConfigError')
}
