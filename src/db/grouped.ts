// Group commit for statements (the facilitator's claims and reads, the payment-identifier's answers, the
// draws on passes of time): the requests of this process that arrive while the previous group's statement is
// in flight go together in the next one, so under load a request costs a share of one round trip and one
// statement instead of its own. Idle, a request goes at once (no added wait). A group that fails as a whole
// (a deadlock with another instance's group, a lost connection) is run again one request a group, so one
// request's error stays its own; or, where running a request again cannot tell a lost commit from a refusal
// (`rerunAlone: false`), each of its requests fails with the group's error.

export class Grouped<Req, Res> {
  private queue: Array<{ request: Req; resolve(r: Res): void; reject(err: unknown): void }> = []
  private running = false

  /** `run` answers a group in its requests' order. At most `max` requests a group. */
  constructor(
    private readonly run: (requests: Req[]) => Promise<Res[]>,
    private readonly max: number,
    private readonly options: { rerunAlone: boolean } = { rerunAlone: true },
  ) {}

  submit(request: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      this.queue.push({ request, resolve, reject })
      if (!this.running) void this.drain()
    })
  }

  private async drain(): Promise<void> {
    this.running = true
    try {
      while (this.queue.length > 0) await this.commit(this.queue.splice(0, this.max))
    } finally {
      this.running = false
    }
  }

  private async commit(group: typeof this.queue): Promise<void> {
    try {
      const answers = await this.run(group.map((p) => p.request))
      for (const [i, p] of group.entries()) p.resolve(answers[i]!)
      return
    } catch (err) {
      if (group.length === 1 || !this.options.rerunAlone) {
        for (const p of group) p.reject(err)
        return
      }
    }
    await Promise.all(
      group.map((p) =>
        this.run([p.request]).then(
          ([answer]) => p.resolve(answer!),
          (err) => p.reject(err),
        ),
      ),
    )
  }
}
