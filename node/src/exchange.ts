/**
 * One round trip of a worker: settle what finished, renew what runs, lease
 * what fits. Its NACKs (WITHSTATE) and RENEWs go pipelined with one
 * `VTRR.LEASE ... COUNT n ACK ...` (`ACKCOST` for the jobs that report a
 * cost, `ACKRESULT` for those that returned a result) that finishes the
 * succeeded jobs and leases the next ones. The commands and how their
 * replies combine are here, once; `Queue.exchange` only sends them.
 */

import { type Arg, argv, type Charge, commands, type NackOptions, type Returned } from './commands.js';
import type { AckedLeases, Fenced, Lease, NackOutcome } from './types.js';

/** A lease to NACK: after `delayMs`, dead, or released uncounted (shutdown); `reason`: what failed. */
export interface GiveBack extends NackOptions {
  readonly lease: Fenced;
}

/** A lease to RENEW, charging `cost` (what its job cost since its last report) when given. */
export interface Renewal {
  readonly lease: Fenced;
  readonly cost?: number;
}

/** What one round trip asks. */
export interface Round {
  readonly leaseMs: number;
  /** Succeeded jobs, their weight standing as their cost. */
  readonly acks: readonly Fenced[];
  /** Succeeded jobs that report what they cost (VTRR.ACKCOST). */
  readonly charges: readonly Charge[];
  /** Succeeded jobs that returned a result (VTRR.ACKRESULT; it reports no cost). */
  readonly results: readonly Returned[];
  readonly nacks: readonly GiveBack[];
  readonly renewals: readonly Renewal[];
  /** How many new leases to ask for (0: none). */
  readonly count: number;
  /** Wait for an item up to this long, when it leases. */
  readonly blockMs?: number;
}

/** What came back, in the order asked. */
export interface RoundResult {
  readonly acked: boolean[];
  readonly charged: boolean[];
  readonly returned: boolean[];
  /** Where each NACK sent its item; null when its lease was no longer current. */
  readonly nacked: (NackOutcome | null)[];
  /**
   * False when a lease is lost; null when its RENEW was not asked (a
   * ShardedQueue's lease whose sub-queue cannot be reached now: the next
   * renewal asks again).
   */
  readonly renewed: (boolean | null)[];
  readonly leases: Lease[];
}

/** A command ready to send, and how its reply reads. */
export interface Sent {
  readonly args: Arg[];
  readonly read: (reply: unknown) => unknown;
}

export function isEmpty(round: Round): boolean {
  return (
    round.acks.length +
      round.charges.length +
      round.results.length +
      round.nacks.length +
      round.renewals.length +
      round.count ===
    0
  );
}

/** Which of a round's kinds of ACK its LEASE carries: one call takes one form. */
type Carried = 'acks' | 'charges' | 'results' | 'none';

function carriedBy(round: Round): Carried {
  if (round.count === 0) {
    return 'none';
  }
  return round.charges.length > 0
    ? 'charges'
    : round.acks.length > 0
      ? 'acks'
      : round.results.length > 0
        ? 'results'
        : 'none';
}

/**
 * The commands of `round` for queue `name`, in the order `read` expects their
 * replies: NACKs, RENEWs, then the ACKs the LEASE does not carry (one each,
 * so each reply says whether it took), then the LEASE (last, as only it may
 * block). The LEASE carries the charges when there are any (`ACKCOST`), else
 * the acks, else the results (`ACKRESULT`).
 */
export function commandsOf(name: string, round: Round): Sent[] {
  const sent: Sent[] = [
    ...round.nacks.map((give) => ({
      args: argv(commands.nack, name, give.lease, give),
      read: commands.nack.transformReply,
    })),
    ...round.renewals.map(({ lease, cost }) => ({
      args: argv(commands.renew, name, lease, round.leaseMs, cost),
      read: commands.renew.transformReply,
    })),
  ];
  const leaseOptions = { leaseMs: round.leaseMs, ...(round.blockMs === undefined ? {} : { blockMs: round.blockMs }) };
  const carried = carriedBy(round);
  if (carried !== 'acks') {
    sent.push(
      ...round.acks.map((lease) => ({ args: argv(commands.ack, name, [lease]), read: commands.ack.transformReply })),
    );
  }
  if (carried !== 'charges') {
    sent.push(
      ...round.charges.map((charge) => ({
        args: argv(commands.ackCost, name, [charge]),
        read: commands.ackCost.transformReply,
      })),
    );
  }
  if (carried !== 'results') {
    sent.push(
      ...round.results.map((returned) => ({
        args: argv(commands.ackResult, name, [returned]),
        read: commands.ackResult.transformReply,
      })),
    );
  }
  if (carried === 'charges') {
    sent.push({
      args: argv(commands.ackCostAndLease, name, round.charges, round.count, leaseOptions),
      read: commands.ackCostAndLease.transformReply,
    });
  } else if (carried === 'results') {
    sent.push({
      args: argv(commands.ackResultAndLease, name, round.results, round.count, leaseOptions),
      read: commands.ackResultAndLease.transformReply,
    });
  } else if (carried === 'acks') {
    sent.push({
      args: argv(commands.ackAndLease, name, round.acks, round.count, leaseOptions),
      read: commands.ackAndLease.transformReply,
    });
  } else if (round.count > 0) {
    sent.push({
      args: argv(commands.leaseMany, name, round.count, leaseOptions),
      read: commands.leaseMany.transformReply,
    });
  }
  return sent;
}

/** The read replies of `commandsOf(name, round)` as one result. */
export function read(round: Round, values: unknown[]): RoundResult {
  let at = 0;
  const take = <T>(n: number): T[] => {
    const taken = values.slice(at, at + n) as T[];
    at += n;
    return taken;
  };
  const nacked = take<NackOutcome | null>(round.nacks.length);
  const renewed = take<boolean>(round.renewals.length);
  const carried = carriedBy(round);
  const alone = (kind: Carried, n: number): boolean[] =>
    kind === carried ? [] : take<number>(n).map((count) => count === 1);
  const acked = alone('acks', round.acks.length);
  const charged = alone('charges', round.charges.length);
  const returned = alone('results', round.results.length);
  if (carried !== 'none') {
    const [last] = take<AckedLeases>(1);
    const took = last?.acked ?? [];
    return {
      nacked,
      renewed,
      acked: carried === 'acks' ? took : acked,
      charged: carried === 'charges' ? took : charged,
      returned: carried === 'results' ? took : returned,
      leases: last?.leases ?? [],
    };
  }
  const [leases] = round.count > 0 ? take<Lease[]>(1) : [];
  return { nacked, renewed, acked, charged, returned, leases: leases ?? [] };
}
