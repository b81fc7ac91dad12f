import { describe, expect, it } from 'vitest'
import { checkTargetUrl, guardedConnector, isPrivateAddress } from '../src/ssrf.ts'

// IPv4 addresses written as IPv6 (mapped ::ffff:0:0/96 and compatible ::/96) reach the IPv4 host.
const EMBEDDED_IPV4 = [
  '::ffff:127.0.0.1',
  '::ffff:7f00:1',
  '::FFFF:7F00:0001',
  '0:0:0:0:0:ffff:7f00:1',
  '0000:0000:0000:0000:0000:ffff:a9fe:a9fe', // 169.254.169.254, cloud metadata
  '::ffff:a00:1', // 10.0.0.1
  '::ffff:8.8.8.8', // public, but nothing needs to name it this way
  '::127.0.0.1',
  '::7f00:1',
  '::a9fe:a9fe',
  '::',
]

describe('IPv4 embedded in IPv6 is refused', () => {
  it('flags ::/96 and ::ffff:0:0/96 in every notation', () => {
    for (const ip of EMBEDDED_IPV4) expect(isPrivateAddress(ip), ip).toBe(true)
  })

  it('still lets public IPv6 through', () => {
    for (const ip of ['2606:4700:4700::1111', '2001:4860:4860::8888', '::1:0:0:1']) {
      expect(isPrivateAddress(ip), ip).toBe(false)
    }
  })

  it('refuses the bracketed URL forms as upstream or webhook targets', async () => {
    for (const host of ['[::ffff:7f00:1]', '[::ffff:127.0.0.1]', '[::127.0.0.1]', '[::7f00:1]']) {
      expect(await checkTargetUrl(`http://${host}:8080/x`, { allowPrivate: false }), host).toMatchObject({
        ok: false,
        reason: 'private_target',
      })
    }
  })

  it('refuses to open a socket to such a literal at connect time', async () => {
    const connect = guardedConnector(1000)
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
      connect(
        { hostname: '[::ffff:7f00:1]', host: '[::ffff:7f00:1]:80', protocol: 'http:', port: '80' },
        (...args: unknown[]) => resolve(args[0] as NodeJS.ErrnoException | null),
      )
    })
    expect(err?.code).toBe('ERR_TOLLGATE_PRIVATE_TARGET')
  })
})
