import { describe, expect, it } from 'vitest'
import { addressKey, clientAddress, parseTrustedProxies } from '../../src/data-plane/client-address.ts'

describe('clientAddress', () => {
  const trusted = parseTrustedProxies(['10.0.0.0/8', '127.0.0.1', 'fd00::/8'])

  it('is the peer when no proxy is trusted, whatever the headers say', () => {
    expect(clientAddress('10.1.1.1', ['203.0.113.5'], null)).toBe('10.1.1.1')
  })

  it('is the peer when the peer is not a trusted proxy', () => {
    expect(clientAddress('198.51.100.7', ['203.0.113.5'], trusted)).toBe('198.51.100.7')
  })

  it('walks from the nearest hop to the first untrusted one; spoofed entries further left are ignored', () => {
    expect(clientAddress('127.0.0.1', ['203.0.113.5'], trusted)).toBe('203.0.113.5')
    expect(clientAddress('127.0.0.1', ['1.2.3.4', '203.0.113.5', '10.0.0.2'], trusted)).toBe('203.0.113.5')
    expect(clientAddress('127.0.0.1', ['2001:db8::9', 'fd00::1'], trusted)).toBe('2001:db8::9')
  })

  it('stops at a hop that is not an address: the proxy that wrote it is the client', () => {
    expect(clientAddress('127.0.0.1', ['unknown', '10.0.0.3'], trusted)).toBe('10.0.0.3')
    expect(clientAddress('127.0.0.1', [], trusted)).toBe('127.0.0.1')
  })

  it('refuses a bad trusted_proxies entry, naming it', () => {
    expect(() => parseTrustedProxies(['10.0.0.0/33'])).toThrow(/10\.0\.0\.0\/33/)
    expect(() => parseTrustedProxies(['proxy.internal'])).toThrow(/proxy\.internal/)
  })

  it('keys IPv6 clients by their /64 and mapped IPv4 as IPv4', () => {
    expect(addressKey('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64')
    expect(addressKey('2001:db8:1:2::9')).toBe('2001:db8:1:2::/64')
    expect(addressKey('::ffff:203.0.113.5')).toBe('203.0.113.5')
  })
})
