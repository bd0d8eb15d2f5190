// The shell commands of a Markdown page, as a reader would type them: every fenced block whose
// info string is sh, bash or shell, cut into commands the way bash cuts them (a line break ends a
// command unless it is inside quotes or escaped by a trailing backslash), each with the comment
// that follows it on its line (`# 201, the account`), which may state the answer to expect.

export interface DocCommand {
  /** The page, relative to the repository (README.md, docs/config.md). */
  file: string;
  /** The line of the page the command starts on (1-based). */
  line: number;
  /** The command as written, comments removed, continuation lines kept. */
  text: string;
  /** The comment after the command's last line, without its `#`, or null. */
  comment: string | null;
}

const SHELL_FENCE = /^(`{3,}|~{3,})\s*(sh|bash|shell)\s*$/;

/** The shell blocks of a page: each with the page line of its first content line. */
export function shellBlocks(markdown: string): { line: number; text: string }[] {
  const lines = markdown.split('\n');
  const blocks: { line: number; text: string }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(`{3,}|~{3,})(.*)$/.exec(lines[i]!);
    if (open === null) continue;
    const fence = open[1]!;
    const closes = (l: string) => l.trim().length >= fence.length && l.trim() === fence[0]!.repeat(l.trim().length);
    let end = i + 1;
    while (end < lines.length && !closes(lines[end]!)) end++;
    if (SHELL_FENCE.test(lines[i]!.trim())) blocks.push({ line: i + 2, text: lines.slice(i + 1, end).join('\n') });
    i = end;
  }
  return blocks;
}

/**
 * Cuts a block into commands. Quotes (single, double) and backslash escapes are followed so that
 * a JSON body broken over two lines inside '...' stays one command; a `#` that starts a word
 * outside quotes begins a comment; a line ending in `|`, `&&` or `||` continues.
 */
export function splitCommands(block: string, firstLine = 1): { line: number; text: string; comment: string | null }[] {
  const out: { line: number; text: string; comment: string | null }[] = [];
  let text = '';
  let comment: string | null = null;
  let quote: "'" | '"' | null = null;
  let line = firstLine;
  let start = firstLine;
  const flush = () => {
    const trimmed = text.trim();
    if (trimmed !== '') out.push({ line: start, text: trimmed, comment });
    text = '';
    comment = null;
  };
  for (let i = 0; i < block.length; i++) {
    const c = block[i]!;
    if (text.trim() === '' && c !== '\n') start = line;
    if (c === '\n') line++;
    if (quote === "'") {
      text += c;
      if (c === "'") quote = null;
      continue;
    }
    if (c === '\\' && i + 1 < block.length) {
      text += c + block[i + 1];
      if (block[i + 1] === '\n') line++;
      i++;
      continue;
    }
    if (quote === '"') {
      text += c;
      if (c === '"') quote = null;
      continue;
    }
    if (c === "'" || c === '"') {
      quote = c;
      text += c;
      continue;
    }
    if (c === '#' && (text === '' || /\s$/.test(text))) {
      const eol = block.indexOf('\n', i);
      const body = block.slice(i + 1, eol === -1 ? block.length : eol).trim();
      if (text.trim() !== '') comment = body;
      i = (eol === -1 ? block.length : eol) - 1;
      continue;
    }
    if (c === '\n') {
      if (/(\||&&)\s*$/.test(text)) { text += c; continue; }
      flush();
      continue;
    }
    text += c;
  }
  if (quote !== null) throw new Error(`line ${start}: unclosed ${quote} quote in a shell block`);
  flush();
  return out;
}

/** Every command of every shell block of a page. */
export function pageCommands(file: string, markdown: string): DocCommand[] {
  return shellBlocks(markdown).flatMap((b) => splitCommands(b.text, b.line).map((c) => ({ file, ...c })));
}
