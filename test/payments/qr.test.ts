// The server-side QR encoder: structure a scanner relies on (finders, timing, format bits) and a stable SVG.
// The module matrices were cross-checked against the `qrcode` package (byte mode, every ECC level and mask).
import { describe, expect, it } from 'vitest'
import { encodeQr, qrSvg } from '../../src/data-plane/qr.ts'

const URI =
  'ethereum:0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913@8453/transfer?address=0xE2231C3C9e34D11ac23B6737333a05C8bb60Cd1E&uint256=24990000'

/** Reads the 15 format bits next to the top-left finder, unmasks them and checks their BCH code. */
function formatInfo(m: boolean[][]): { eccBits: number; mask: number } {
  let bits = 0
  const at = (x: number, y: number) => (m[y]![x] ? 1 : 0)
  const order: Array<[number, number]> = [
    [8, 0],
    [8, 1],
    [8, 2],
    [8, 3],
    [8, 4],
    [8, 5],
    [8, 7],
    [8, 8],
    [7, 8],
    [5, 8],
    [4, 8],
    [3, 8],
    [2, 8],
    [1, 8],
    [0, 8],
  ]
  order.forEach(([x, y], i) => {
    bits |= at(x, y) << i
  })
  const raw = bits ^ 0x5412
  const data = raw >>> 10
  let rem = data
  for (let i = 0; i < 10; i++) rem = (rem << 1) ^ ((rem >>> 9) * 0x537)
  expect(raw & 0x3ff).toBe(rem & 0x3ff)
  return { eccBits: data >>> 3, mask: data & 7 }
}

describe('QR encoder', () => {
  it('encodes an EIP-681 URI with finder, timing and valid format bits', () => {
    for (const [ecc, eccBits] of [
      ['L', 1],
      ['M', 0],
      ['Q', 3],
      ['H', 2],
    ] as const) {
      const qr = encodeQr(URI, { ecc })
      expect(qr.size).toBe(qr.version * 4 + 17)
      const m = qr.modules
      // Finder pattern centres (3×3 dark) and their separators at the three corners.
      for (const [cx, cy] of [
        [3, 3],
        [qr.size - 4, 3],
        [3, qr.size - 4],
      ]) {
        for (let d = -1; d <= 1; d++) expect(m[cy! + d]![cx! + d]).toBe(true)
        expect(m[cy! - 2]![cx!]).toBe(false)
        expect(m[cy! - 3]![cx!]).toBe(true)
      }
      for (let i = 8; i < qr.size - 8; i++) {
        expect(m[6]![i]).toBe(i % 2 === 0)
        expect(m[i]![6]).toBe(i % 2 === 0)
      }
      expect(formatInfo(m)).toEqual({ eccBits, mask: qr.mask })
    }
  })

  it('chooses the smallest version that holds the text', () => {
    expect(encodeQr('HELLO', { ecc: 'M' }).version).toBe(1)
    expect(encodeQr(URI, { ecc: 'L' }).version).toBeLessThan(encodeQr(URI, { ecc: 'H' }).version)
    expect(() => encodeQr('x'.repeat(3000), { ecc: 'L' })).toThrow(RangeError)
  })

  it('renders one path with a quiet zone, and the same text gives the same SVG', () => {
    const svg = qrSvg(URI, { ecc: 'L', label: 'Pay <1> USDC' })
    const size = encodeQr(URI, { ecc: 'L' }).size
    expect(svg).toContain(`viewBox="0 0 ${size + 8} ${size + 8}"`)
    expect(svg.match(/<path/g)).toHaveLength(1)
    expect(svg).toContain('aria-label="Pay 1 USDC"')
    expect(qrSvg(URI, { ecc: 'L', label: 'Pay <1> USDC' })).toBe(svg)
  })
})
