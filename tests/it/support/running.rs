//! A talosprov run in the background, for the tests that stop it: its
//! stderr collected as it comes (and echoed), waits for a line, signals by
//! name, and its exit under a bound.

use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use super::cli::signal;
use super::lab::Lab;

/// A running talosprov whose stderr is collected as it comes.
pub struct Running {
    child: Child,
    stderr: Arc<Mutex<String>>,
    lines: tokio::sync::watch::Receiver<usize>,
    /// The task that collects stderr: done once the pipe is closed.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Start `talosprov args -f <the lab's topology>`.
    pub fn start(lab: &Lab, args: &[&str]) -> Running {
        let mut child = lab
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start talosprov");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = tokio::sync::watch::channel(0usize);
        let pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                eprintln!("talosprov: {line}");
                {
                    let mut text = sink.lock().expect("lock");
                    text.push_str(&line);
                    text.push('\n');
                }
                // Not under the text's lock: `wait_for` takes that lock while it
                // holds the channel's, so holding both here would deadlock.
                tx.send_modify(|n| *n += 1);
            }
        });
        Running {
            child,
            stderr,
            lines,
            reader: Some(reader),
        }
    }

    /// Send the signal `name` (`TERM`, `INT`, `KILL`).
    pub fn signal(&self, name: &str) {
        signal(self.child.id().expect("pid"), name);
    }

    /// The stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// Wait (at most `secs`) until stderr has a line containing `text`.
    pub async fn wait_for(&mut self, text: &str, secs: u64) {
        let stderr = self.stderr.clone();
        let found = tokio::time::timeout(
            Duration::from_secs(secs),
            self.lines
                .wait_for(|_| stderr.lock().expect("lock").contains(text)),
        )
        .await;
        let ok = found.is_ok_and(|r| r.is_ok());
        assert!(
            ok,
            "no {text:?} on stderr within {secs} s:\n{}",
            self.stderr()
        );
    }

    /// Wait (at most `secs`) for the process to exit.
    pub async fn exit(&mut self, secs: u64) -> ExitStatus {
        let status = tokio::time::timeout(Duration::from_secs(secs), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("talosprov did not exit within {secs} s"))
            .expect("wait");
        // Let the reader take the last lines: stdout to its end, and stderr's
        // reader until the pipe closed (a child the process left may hold it:
        // at most 5 s).
        let reader = self.reader.take();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            let mut out = String::new();
            if let Some(mut pipe) = self.child.stdout.take() {
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut out).await;
            }
            if let Some(reader) = reader {
                let _ = reader.await;
            }
        })
        .await;
        status
    }
}
