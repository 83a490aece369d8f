/**
 * The worker's log lines go through a `Logger`: pino, winston, bunyan and
 * `console` all fit (each takes a message string at info, warn and error).
 */

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export type LogLevel = 'info' | 'warn' | 'error' | 'silent';

const RANK: Record<LogLevel, number> = { info: 0, warn: 1, error: 2, silent: 3 };

/**
 * Lines on stderr, `2026-12-07T04:50:31.123Z INFO vtrr.worker: ...`, from
 * `level` on (`VTRR_LOG_LEVEL`, else info).
 */
export function consoleLogger(level: LogLevel = envLevel()): Logger {
  const at = (name: Exclude<LogLevel, 'silent'>) => (message: string) => {
    if (RANK[name] >= RANK[level]) {
      process.stderr.write(`${new Date().toISOString()} ${name.toUpperCase()} vtrr.worker: ${message}\n`);
    }
  };
  return { info: at('info'), warn: at('warn'), error: at('error') };
}

function envLevel(): LogLevel {
  const given = process.env.VTRR_LOG_LEVEL?.toLowerCase();
  return given !== undefined && given in RANK ? (given as LogLevel) : 'info';
}
